"""Jobs with durable steps for the daemon tests. A step body records each EXECUTION in
``<schema>.effects`` (name ``s<i>``, stamped by the database's clock when it began), so
"a step that was recorded as completed ran again" is a question for SQL: an execution of
(job, step) that began after ``job_steps.finished_at`` of that step."""

from __future__ import annotations

import os
import random
import time

from xjobs import Retry, job

from .daemon_app import _db, record


def _executed(ctx, name: str) -> None:
    schema = os.environ.get("XJOBS_SCHEMA", "xjobs")
    with _db().connection() as db:
        db.execute(f"insert into {schema}.effects (job_id, attempt, pid, name, at) "
                   f"values (%s, %s, %s, %s, clock_timestamp())", (ctx.job_id, ctx.attempt, os.getpid(), name))


# many attempts: a SIGKILL of a process running this job alone charges the job an attempt
@job(queue="steps", idempotency_key=lambda i: f"five:{i['n']}", tenant="none",
     retry=Retry(attempts=50, delay=0, jitter=False))
def five_steps(ctx, input):
    for i in range(1, 6):
        def step(i: int = i) -> int:
            _executed(ctx, f"s{i}")
            time.sleep(random.uniform(0.005, 0.04))    # a kill lands inside a step as often as not
            return i
        assert ctx.step.run(f"s{i}", step) == i


@job(queue="naps", idempotency_key=lambda i: f"nap:{i['n']}", tenant="none")
def napper(ctx, input):
    ctx.step.run("before", lambda: record(ctx, "nap:before"))
    ctx.step.sleep("nap", input["seconds"] * 1000.0)
    ctx.step.run("after", lambda: record(ctx, "nap:after"))


@job(queue="naps", idempotency_key=lambda i: f"quick:{i['n']}", tenant="none")
def quick(ctx, input):
    record(ctx, "quick")


@job(queue="events", idempotency_key=lambda i: f"wait:{i['key']}", tenant="none")
async def waiter(ctx, input):
    paid = await ctx.step.wait_for_event("paid", "order.paid", key=input["key"])
    record(ctx, f"paid:{input['key']}:{paid['amount']}")


@job(queue="steps", idempotency_key=lambda i: f"three:{i['n']}", tenant="none")
def three_steps(ctx, input):
    """Three steps that only take time: every session this job costs is the worker's own."""
    for i in range(1, 4):
        def step(i: int = i) -> int:
            time.sleep(0.04)
            return i
        assert ctx.step.run(f"s{i}", step) == i
