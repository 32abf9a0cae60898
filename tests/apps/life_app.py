"""A job whose first attempt fails inside an xjobs call (a refused progress note) and whose
second completes, logging a line: what ``xjobsd jobs show`` and ``jobs ls`` say of its life."""

from xjobs import Retry, job


@job(queue="life", idempotency_key=lambda i: f"flaky:{i['n']}", tenant="none",
     retry=Retry(attempts=3, delay=0, jitter=False))
def flaky(ctx, input):
    ctx.log.info("attempt begins")
    if ctx.attempt == 1:
        ctx.progress(1, note="a\x00b")   # refused by xjobs: the error names this line
    ctx.progress(1, 1, "done")


@job(queue="life", idempotency_key=lambda i: f"clean:{i['n']}", tenant="none")
def clean(ctx, input):
    return None
