"""Jobs of flow control, for the daemon: a debounced one that answers the input it ran with,
and one that snoozes its first run (it reads its own snooze count through ``xjobs.get``)."""

import xjobs
from xjobs import job


@job(queue="flow", idempotency_key=lambda i: f"doc:{i['doc']}", tenant="none", debounce="2s",
     debounce_max="1m")
def latest(ctx, input):
    return {"v": input["v"], "attempt": ctx.attempt}


@job(queue="flow", idempotency_key=lambda i: f"nap:{i['n']}", tenant="none", max_snoozes=3)
def napper(ctx, input):
    snoozes = xjobs.get(ctx.job_id)["snoozes"]
    if snoozes == 0:
        return ctx.snooze("300ms")
    return {"attempt": ctx.attempt, "snoozes": snoozes}
