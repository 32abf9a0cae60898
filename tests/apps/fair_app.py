"""A job whose claims are shared out by tenant, for the daemon's fair-claims test."""

import time

from xjobs import job


@job(queue="fair", idempotency_key=lambda i: f"{i['t']}:{i['n']}", tenant=lambda i: i["t"], fairness="tenant")
def fair_work(ctx, input):
    time.sleep(0.05)
