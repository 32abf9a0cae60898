"""An app for the dashboard's browser tests."""

import os

from xjobs import Retry, job


@job(queue="ui", idempotency_key=lambda i: str(i["k"]), tenant="none", retry=Retry(attempts=1))
def flagged(ctx, input):
    """Fails while its flag file exists: dead on its one attempt, then fine once it is gone."""
    if os.path.exists(input["flag"]):
        raise RuntimeError(f"the flag {input['flag']} is up")
    return {"ok": True}


@job(queue="ui", idempotency_key=lambda i: str(i["k"]), tenant="none")
def waits(ctx, input):
    """Runs until it is told to stop (a cancel, a drain) or a minute passes."""
    ctx.progress(1, 3, "waiting to be cancelled")
    ctx.signal.wait(60)
    ctx.signal.raise_if_set()


@job(queue="ui", idempotency_key=lambda i: str(i["k"]), tenant="none")
def echo(ctx, input):
    return input


@job(queue="parked", idempotency_key=lambda i: str(i["k"]), tenant="none")
def parked(ctx, input):
    """On a queue this daemon does not serve: it waits, so the overview's depth can be seen."""
