"""An app module that fails at import time, as a typo in a deploy does."""

from xjobs import job


@job(queue="broken", idempotency_key=lambda i: "k", tenant="none")
def fine(ctx, input):
    pass


raise RuntimeError("the settings module is missing BROKER_URL")
