"""Jobs whose bodies return results, for ``xjobs.result`` through the daemon: one answers, one
dies, one completes in its transaction with ``ctx.set_result``."""

from xjobs import Terminal, job


@job(queue="results", idempotency_key=lambda i: f"answer:{i['n']}", tenant="none")
def answer(ctx, input):
    return {"n": input["n"], "square": input["n"] ** 2, "attempt": ctx.attempt}


@job(queue="results", idempotency_key=lambda i: f"refuse:{i['n']}", tenant="none")
def refuse(ctx, input):
    raise Terminal(f"card {input['n']} declined")


@job(queue="results", idempotency_key=lambda i: f"commit:{i['n']}", tenant="none")
def commit(ctx, input):
    with ctx.transaction() as conn:
        conn.execute("select 1")
        ctx.set_result({"committed": input["n"]})
