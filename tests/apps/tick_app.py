"""Jobs and a task for the tick tests: five queues of quick jobs that record their runs, one
that fails, one that hangs past any deadline ignoring its signal, and a cron task."""

from __future__ import annotations

import time

from xjobs import Retry, job, scan, task

from .daemon_app import record


def _quick(queue: str):
    @job(queue=queue, idempotency_key=lambda i: f"{queue}:{i['n']}", tenant="none", name=f"work_{queue}")
    def work(ctx, input):
        record(ctx, f"work_{queue}")
    return work


works = [_quick(f"t{n}") for n in range(1, 6)]


@job(queue="t1", idempotency_key=lambda i: f"fails:{i['n']}", tenant="none", retry=Retry(attempts=3, delay="1m"))
def fails(ctx, input):
    record(ctx, "fails")
    raise ValueError("the upstream said no")


@job(queue="t2", idempotency_key=lambda i: f"hangs:{i['n']}", tenant="none")
def hangs(ctx, input):
    record(ctx, "hangs")
    time.sleep(60)        # deaf to ctx.signal: only the deadline's hand-back ends its turn


@job(queue="t3", idempotency_key=lambda i: "minutely", tenant="none")
def minutely(ctx, input):
    record(ctx, "minutely")


task(name="every_minute", cron="* * * * *", tz="UTC", job=minutely)


@job(queue="t4", idempotency_key=lambda i: f"sliced:{i['n']}", tenant="none")
def sliced(ctx, input):
    """Long work in slices: a unit starts only when the tick leaves time for it; otherwise the
    job parks for a moment (no attempt spent) and the next tick goes on after the last unit."""
    for unit in range(input["units"]):
        if ctx.remaining() < input["unit_s"] * 2:
            ctx.step.sleep(f"pause before {unit}", "1ms")

        def work(unit: int = unit) -> int:
            record(ctx, f"unit:{unit}")
            time.sleep(input["unit_s"])
            return unit
        ctx.step.run(f"unit {unit}", work)


def reconcile(ctx):
    """A scan: finds its own work, safe to run twice; records that it ran."""
    import os

    from .daemon_app import _db
    schema = os.environ.get("XJOBS_SCHEMA", "xjobs")
    with _db().connection() as db:
        db.execute(f"insert into {schema}.effects (job_id, attempt, pid, name) values (0, 0, %s, 'reconcile')",
                   (os.getpid(),))


scan(name="reconcile", every="1h", fn=reconcile)


@job(queue="t5", idempotency_key=lambda i: f"doomed:{i['n']}", tenant="none", retry=Retry(attempts=2, delay=0))
def doomed(ctx, input):
    ctx.log.info("about to fail", extra={"customer": input["n"]})
    raise ValueError("always")
