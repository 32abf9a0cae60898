"""A job with a fleet-wide rate by key, for the daemon test of rate limits: every run records
its start (``daemon_app.record``)."""

from __future__ import annotations

from xjobs import job

from .daemon_app import record


@job(queue="rated", idempotency_key=lambda i: f"r:{i['n']}", tenant="none", rate="50/1s",
     rate_key=lambda i: i["key"])
def rated_call(ctx, input):
    record(ctx, "rated_call")
