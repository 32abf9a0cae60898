"""The fault battery's workload: the jobs ``bench/faults.py`` runs under faults.

Every body leaves evidence outside xjobs' own tables, so the invariants are questions for SQL
that xjobs cannot answer for itself:

* ``app.starts``: one row per body start (``began``: the body's clock, see below);
* ``app.step_runs``: one row per EXECUTION of a ``ctx.step.run`` body, written by the step
  itself on its own connection, outside the step's persistence. A step recorded as completed
  in ``job_steps`` whose body began again after it was recorded ran twice;
* ``app.tx_effects``: written inside ``ctx.transaction()``: exactly one row per completed
  ``tx_effect`` job, none for any other;
* datagrams to the battery (``FAULTS_SOCKET``) when a ``capped`` or ``tenanted`` body
  enters and leaves, so the battery counts the bodies running at every moment.

``began`` is the body's wall clock minus ``FAULTS_SKEW_S`` (the offset the battery
gives a daemon it runs under libfaketime), so it is the machine's real time whatever the
process believes, and it is taken when the body began, not when a stalled connection got
the row to the server.

The app's writes use its own small pool per process on ``XJOBS_DATABASE_URL`` (the daemon's
URL, so through the battery's proxy), in autocommit; a write that fails raises, and the job
retries like any body whose database went away.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from psycopg_pool import ConnectionPool

from xjobs import Retry, job, task

SKEW_S = float(os.environ.get("FAULTS_SKEW_S", "0") or 0)


def _sleep(seconds: float, _event: threading.Event = threading.Event()) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    _event.wait(seconds)


if SKEW_S:
    # Under libfaketime with its monotonic clock left real (the battery's clock-ahead fault),
    # clock_nanosleep on an absolute CLOCK_MONOTONIC deadline, which CPython's time.sleep uses,
    # fails with EINVAL (libfaketime 0.9.10); faking the monotonic clock too would break every
    # timed lock wait instead (sem_clockwait is not intercepted, so it waits hours). So in a
    # skewed daemon the wall clock is faked for everything (time.time, datetime, libpq) and
    # time.sleep waits on an Event (sem_clockwait, real time), here before xjobsd forks.
    time.sleep = _sleep
RETRY = Retry(attempts=40, delay="200ms", max_delay="2s", jitter=True)
STEPS_RETRY = Retry(attempts=60, delay="200ms", max_delay="2s", jitter=True)

_lock = threading.Lock()
_pool: ConnectionPool | None = None
_pool_pid = 0
_sock: socket.socket | None = None


def _db() -> ConnectionPool:
    """This process's pool, opened on first use (never one inherited across a fork)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ConnectionPool(os.environ["XJOBS_DATABASE_URL"], min_size=0, max_size=3, timeout=10,
                                   kwargs={"autocommit": True, "connect_timeout": 5},
                                   open=True, name=f"faults-app-{os.getpid()}")
            _pool_pid = os.getpid()
        return _pool


def began() -> float:
    return time.time() - SKEW_S


def _write(sql: str, params: tuple) -> None:
    with _db().connection() as conn:
        conn.execute(sql, params)


def started(ctx, name: str) -> None:
    """The body's first act: one row per start."""
    _write("insert into app.starts (job_id, name, attempt, pid, began) values (%s, %s, %s, %s, to_timestamp(%s))",
           (ctx.job_id, name, ctx.attempt, os.getpid(), began()))


def nap(ctx, ms: float) -> None:
    """Work that takes ``ms`` and stops early when the run is told to."""
    if ctx.signal.wait(ms / 1000.0):
        ctx.signal.raise_if_set()


def tell(what: str, name: str, ctx, tenant: str = "-") -> None:
    """A datagram to the battery: ``enter``/``exit``, the job, its process and tenant."""
    global _sock
    path = os.environ.get("FAULTS_SOCKET")
    if not path:
        return
    with _lock:
        if _sock is None:
            _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sock.settimeout(1.0)
        sock = _sock
    try:
        sock.sendto(f"{what} {name} {ctx.job_id} {os.getpid()} {tenant}".encode(), path)
    except OSError:
        pass    # the battery is gone or behind: its count is a sample, the run goes on


def _tenant(prefix: str):
    return lambda i: f"{prefix}{i['n'] % 64}"


@job(queue="work", idempotency_key=lambda i: f"plain:{i['n']}", tenant=_tenant("p"), retry=RETRY)
def plain(ctx, input):
    started(ctx, "plain")
    nap(ctx, input.get("ms", 20))


@job(queue="work", idempotency_key=lambda i: f"tx:{i['n']}", tenant=_tenant("x"), retry=RETRY)
def tx_effect(ctx, input):
    """Its effect commits with the job's completion, in one transaction; the transaction is
    held open a little, so kills and resets land between the write and the commit too."""
    started(ctx, "tx_effect")
    nap(ctx, input.get("ms", 20))
    with ctx.transaction() as conn:
        conn.execute("insert into app.tx_effects (job_id, n, attempt, pid) values (%s, %s, %s, %s)",
                     (ctx.job_id, input["n"], ctx.attempt, os.getpid()))
        time.sleep(input.get("hold_ms", 20) / 1000.0)


def _step(ctx, step: str, value):
    def body():
        _write("insert into app.step_runs (job_id, step, attempt, pid, began) "
               "values (%s, %s, %s, %s, to_timestamp(%s))", (ctx.job_id, step, ctx.attempt, os.getpid(), began()))
        time.sleep(0.01)
        return value
    return body


@job(queue="steps", idempotency_key=lambda i: f"five:{i['n']}", tenant=_tenant("f"), retry=STEPS_RETRY)
def five_steps(ctx, input):
    """Five durable steps: run, sleep, run, wait for the battery's event, run."""
    n = input["n"]
    started(ctx, "five_steps")
    assert ctx.step.run("s1", _step(ctx, "s1", n)) == n
    ctx.step.sleep("s2", input.get("nap_ms", 1000))
    assert ctx.step.run("s3", _step(ctx, "s3", n)) == n
    paid = ctx.step.wait_for_event("s4", "fault.paid", key=f"five-{n}")
    ctx.step.run("s5", _step(ctx, "s5", paid.get("amount") if isinstance(paid, dict) else None))


@job(queue="work", idempotency_key=lambda i: "tick", tenant="none", retry=RETRY)
def tick(ctx, input):
    started(ctx, "tick")


task(name="every_second", cron="* * * * * *", tz="UTC", job=tick, catch_up="run-all", max_catch_up=1000)


@job(queue="work", idempotency_key=lambda i: f"ob:{i['n']}", tenant=_tenant("o"), retry=RETRY)
def outboxed(ctx, input):
    started(ctx, "outboxed")
    nap(ctx, input.get("ms", 20))


@job(queue="limited", idempotency_key=lambda i: f"capped:{i['n']}", tenant=_tenant("c"), retry=RETRY,
     concurrency=3)
def capped(ctx, input):
    """At most three of these run at once in the whole fleet (job(concurrency=3))."""
    tell("enter", "capped", ctx)
    try:
        started(ctx, "capped")
        nap(ctx, input.get("ms", 300))
    finally:
        tell("exit", "capped", ctx)


@job(queue="limited", idempotency_key=lambda i: f"tenanted:{i['n']}", tenant=lambda i: f"T{i['n'] % 3}",
     retry=RETRY)
def tenanted(ctx, input):
    """Three tenants; each worker process runs at most ``limits.tenant`` of one at once."""
    tell("enter", "tenanted", ctx, ctx.tenant)
    try:
        started(ctx, "tenanted")
        nap(ctx, input.get("ms", 300))
    finally:
        tell("exit", "tenanted", ctx, ctx.tenant)


@job(queue="work", idempotency_key=lambda i: f"canary:{i['n']}", tenant=_tenant("k"), retry=RETRY)
def canary(ctx, input):
    """The battery's probe of recovery: enqueued (and staged) after each fault."""
    started(ctx, "canary")


APP_DDL = """
create schema if not exists app;
create table if not exists app.starts (job_id bigint not null, name text not null, attempt int not null,
    pid int not null, began timestamptz not null, at timestamptz not null default clock_timestamp());
create index if not exists starts_job_idx on app.starts (job_id);
create table if not exists app.step_runs (job_id bigint not null, step text not null, attempt int not null,
    pid int not null, began timestamptz not null, at timestamptz not null default clock_timestamp());
create index if not exists step_runs_job_idx on app.step_runs (job_id, step);
-- no unique constraint on purpose: a second effect of one job must be countable, not refused
create table if not exists app.tx_effects (job_id bigint not null, n bigint not null, attempt int not null,
    pid int not null, at timestamptz not null default clock_timestamp());
create index if not exists tx_effects_job_idx on app.tx_effects (job_id);
-- written in the staging transaction itself: the committed stagings are exactly its rows
create table if not exists app.staged (n bigint not null, outbox_id bigint not null,
    at timestamptz not null default clock_timestamp());
"""
