"""Jobs for the daemon tests of concurrency by key: ``paired`` runs at most two per account,
``sequenced`` one at a time per account in enqueue order. Every body records its start
(``daemon_app.record``), so order and overlap are questions for SQL."""

from __future__ import annotations

import time

from xjobs import job

from .daemon_app import record


@job(queue="keyed", idempotency_key=lambda i: f"p:{i['n']}", tenant="none",
     concurrency=2, concurrency_key=lambda i: i["account"])
def paired(ctx, input):
    record(ctx, "paired")
    time.sleep(float(input.get("seconds", 0.05)))


@job(queue="keyed", idempotency_key=lambda i: f"s:{i['account']}:{i['n']}", tenant="none",
     concurrency=1, concurrency_key=lambda i: i["account"], ordered=True)
def sequenced(ctx, input):
    record(ctx, "sequenced")
    time.sleep(float(input.get("seconds", 0.0)))
