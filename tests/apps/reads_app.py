"""Jobs whose state fills the projection ``xjobs.get`` and ``xjobsd jobs show --json`` share:
steps, a failed attempt's traceback in the history, a sleep a suspended job waits for, a dead
letter."""

from xjobs import Retry, Terminal, job


@job(queue="reads", idempotency_key=lambda i: f"suspends:{i['n']}", tenant="none",
     retry=Retry(attempts=3, delay=0, jitter=False))
def suspends(ctx, input):
    ctx.step.run("fetch", lambda: {"rows": 3})
    if ctx.attempt == 1:
        raise ValueError("the upstream said no")
    ctx.step.sleep("cool off", 3_600_000)


@job(queue="reads", idempotency_key=lambda i: f"dies:{i['n']}", tenant="none")
def dies(ctx, input):
    raise Terminal("no such customer")


@job(queue="reads", idempotency_key=lambda i: f"answers:{i['n']}", tenant="none")
def answers(ctx, input):
    return {"n": input["n"], "words": ["x" * 50] * input.get("long", 0), "html": "<b>bold</b>"}
