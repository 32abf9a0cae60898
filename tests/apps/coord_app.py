"""Jobs and a task for the daemon tests of the scheduler, the outbox relay and fleet-wide
concurrency. Every body records its start (``daemon_app.record``); ``capped_work`` also
records when it ended, so overlapping runs can be counted in SQL."""

from __future__ import annotations

import os
import time

from xjobs import job, task

from .daemon_app import _db, record


@job(queue="beats", idempotency_key=lambda i: "beat", tenant="none")
def beat(ctx, input):
    record(ctx, "beat")


task(name="every_second", cron="* * * * * *", tz="UTC", job=beat, catch_up="run-all", max_catch_up=1000)


@job(queue="outboxed", idempotency_key=lambda i: f"o:{i['n']}", tenant="none")
def outboxed(ctx, input):
    record(ctx, "outboxed")


@job(queue="capped", idempotency_key=lambda i: f"c:{i['n']}", tenant="none", concurrency=3)
def capped_work(ctx, input):
    began = time.time()
    record(ctx, "capped_work")
    time.sleep(float(input.get("seconds", 0.1)))
    schema = os.environ.get("XJOBS_SCHEMA", "xjobs")
    with _db().connection() as conn:
        conn.execute(f"insert into {schema}.spans (job_id, pid, began, ended) "
                     f"values (%s, %s, to_timestamp(%s), clock_timestamp())", (ctx.job_id, os.getpid(), began))
