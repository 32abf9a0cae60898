"""A job declaring a fleet-wide concurrency cap, which this daemon must refuse to run."""

from xjobs import job


@job(queue="capped", idempotency_key=lambda i: str(i["n"]), tenant="none", concurrency=2)
def capped(ctx, input):
    pass
