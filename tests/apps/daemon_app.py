"""Jobs for the daemon tests and the soak benchmark.

Each run records itself in ``<schema>.effects`` (job id, attempt, pid, time) BEFORE the body
does anything else: a row per start, so "ran exactly once" and "ran twice" are questions for
SQL. ``XJOBS_DATABASE_URL`` and ``XJOBS_SCHEMA`` say where, as they do for the daemon itself.

The record is one statement on a small per-process pool, and ``effects`` is indexed on
``job_id``: the soak benchmark runs hundreds of bodies a second, and a record that scanned
a growing table over one shared connection measured itself, not the queue.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from xjobs import job

_lock = threading.Lock()
_pool: ConnectionPool | None = None
_pool_pid = 0


def effects_ddl(schema: str) -> str:
    return (f"create table if not exists {schema}.effects (job_id bigint not null, attempt int not null, "
            f"pid int not null, name text not null, at timestamptz not null default clock_timestamp()); "
            f"create index if not exists effects_job_id_idx on {schema}.effects (job_id); "
            f"create table if not exists {schema}.spans (job_id bigint not null, pid int not null, "
            f"began timestamptz not null, ended timestamptz not null)")


def _db() -> ConnectionPool:
    """This process's pool, opened on first use; a forked child never uses its parent's
    (nor closes it: that would end the parent's sessions)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ConnectionPool(os.environ["XJOBS_DATABASE_URL"], min_size=1, max_size=4,
                                   kwargs={"autocommit": True}, open=True,
                                   name=f"daemon-app-effects-{os.getpid()}")
            _pool_pid = os.getpid()
        return _pool


def record(ctx, name: str) -> int:
    """One row per body start, stamped when the body began (not when a pooled connection got
    round to the insert), so enqueue-to-start latency measures the queue, not this table.
    Answers how many times this job had started before: the ``returning`` subquery reads the
    statement's snapshot, which does not hold the row being inserted."""
    began = time.time()
    schema = os.environ.get("XJOBS_SCHEMA", "xjobs")
    with _db().connection() as db:
        return db.execute(f"insert into {schema}.effects (job_id, attempt, pid, name, at) "  # type: ignore[index]
                          f"values (%(id)s, %(attempt)s, %(pid)s, %(name)s, to_timestamp(%(began)s)) "
                          f"returning (select count(*) from {schema}.effects where job_id = %(id)s)",
                          {"id": ctx.job_id, "attempt": ctx.attempt, "pid": os.getpid(), "name": name,
                           "began": began}).fetchone()[0]


@job(queue="alpha", idempotency_key=lambda i: f"a:{i['n']}", tenant="none")
def touch_alpha(ctx, input):
    record(ctx, "touch_alpha")


@job(queue="beta", idempotency_key=lambda i: f"b:{i['n']}", tenant="none")
def touch_beta(ctx, input):
    record(ctx, "touch_beta")


@job(queue="slow", idempotency_key=lambda i: f"hold:{i['n']}", tenant="none")
def hold(ctx, input):
    """Runs ``seconds``; with ``watch`` it stops early when ``ctx.signal`` is set. When it was
    delivered before (an interrupted or abandoned run gives its attempt back, so the attempt
    number cannot tell), ``quick_retry`` makes it finish at once."""
    earlier = record(ctx, "hold")
    if earlier and input.get("quick_retry"):
        return
    seconds = float(input.get("seconds", 10))
    if input.get("watch", True):
        if ctx.signal.wait(seconds):
            ctx.signal.raise_if_set()
    else:
        end = time.monotonic() + seconds
        while time.monotonic() < end:   # deliberately deaf to ctx.signal
            time.sleep(0.05)


@job(queue="appconn", idempotency_key=lambda i: f"ac:{i['n']}", tenant="none")
def app_conn_write(ctx, input):
    """Writes on a connection of the application's own, opened without naming itself, in a
    statement that lands ``sleep`` seconds later (a big UPDATE, a lock wait). A later delivery
    does nothing but record its start."""
    if record(ctx, "app_conn_write"):
        return
    schema = os.environ.get("XJOBS_SCHEMA", "xjobs")
    with psycopg.connect(os.environ["XJOBS_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(f"insert into {schema}.effects (job_id, attempt, pid, name) "
                     f"select %s, %s, %s, 'late-write' from pg_sleep(%s)",
                     (ctx.job_id, ctx.attempt, os.getpid(), float(input.get("sleep", 3))))


@job(queue="soak_a", idempotency_key=lambda i: f"sa:{i['n']}", tenant="none")
def soak_a(ctx, input):
    """Soak work: record the start, then take ``ms`` milliseconds (or stop on ctx.signal)."""
    record(ctx, "soak_a")
    if ctx.signal.wait(input.get("ms", 0) / 1000.0):
        ctx.signal.raise_if_set()


@job(queue="soak_b", idempotency_key=lambda i: f"sb:{i['n']}", tenant="none")
def soak_b(ctx, input):
    record(ctx, "soak_b")
    if ctx.signal.wait(input.get("ms", 0) / 1000.0):
        ctx.signal.raise_if_set()


@job(queue="slow", idempotency_key=lambda i: f"paged:{i['n']}", tenant="none")
def paged(ctx, input):
    """Reports its progress page by page, then waits for its signal (a drain or a cancel)."""
    record(ctx, "paged")
    pages = int(input.get("pages", 5))
    for page in range(1, pages + 1):
        ctx.progress(page, pages, f"page {page}")
    ctx.signal.wait(float(input.get("seconds", 30)))


@job(queue="slow", idempotency_key=lambda i: f"stop:{i['n']}", tenant="none")
def stoppable(ctx, input):
    """Waits for its stop signal (at most ``seconds``), then records what it heard
    (``stopped: X_JOB_CANCELLED``): how a test sees that a cancel reached the body."""
    record(ctx, "stoppable")
    if ctx.signal.wait(float(input.get("seconds", 300))):
        record(ctx, f"stopped: {ctx.signal.code}")
