"""Test helpers: run a body inline, run a queue to idle in the test, assert what was enqueued.

Three ways to test a job, from the smallest to the most faithful:

- ``run_inline(handle, input)`` calls the body once, in the test, with a real ``Ctx``
  (``job_id``, ``attempt``, ``queue``, ``tenant``, ``name``, a ``RunSignal`` the test may
  abort, ``log``). The input is checked and encoded as ``enqueue`` would, and the body
  gets it back as a worker would (decoded JSON). Nothing is written to any queue; retry
  policy and timeouts are not applied: the body's return value comes back, its exception
  propagates. There is no job row, so ``ctx.transaction()`` cannot complete one: with
  ``conn=`` (a psycopg connection) it is a savepoint inside the test's own transaction
  (begun if the connection is idle, so the test's rollback undoes it), without it raises ``X_INLINE_NO_TRANSACTION``.
- ``run_until_idle(queue)`` runs a real ``QueueWorker`` in the calling thread (bodies on
  its executor, as in production) until it holds nothing and no job of its queues is due,
  and answers what ran, per job name and outcome. Works on any driver. Jobs due later
  (a retry's delay, ``enqueue(delay=...)``) stay put unless ``with_scheduled=True``, which
  steps the driver's ``ManualClock`` to each next due time; a driver on the real clock
  refuses it. (Not called ``drain``: here a drain is the shutdown phase, and its runs
  settle as ``interrupted``.)
- ``enqueued``, ``assert_enqueued`` and ``refute_enqueued`` read what is queued.

``memory_queue()`` points ``xjobs`` at a fresh ``MemoryDriver`` (on a ``ManualClock``
started at the wall clock's now) and puts the previous driver back after::

    import pytest
    from xjobs import testing
    from myapp.jobs import send_welcome, signup

    @pytest.fixture
    def queue():
        with testing.memory_queue() as driver:
            yield driver

    def test_signup_sends_one_welcome(queue):
        signup(user_id=1, org_id="acme")
        testing.assert_enqueued(send_welcome, input={"user_id": 1, "org_id": "acme"}, count=1)
        assert testing.run_until_idle("emails").completed == 1

The process-wide driver is shared by every thread: run tests that swap it one at a time
per process (pytest-xdist runs processes, which is fine).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, cast

import orjson
import psycopg

from . import config
from .clock import SYSTEM_CLOCK, Clock, ManualClock, monotonic_ms
from .context import Ctx, RunSignal, running
from .drivers.base import LATEST_MS, LIVE_STATES, STATES, JobDriver, JobView, Lease, ListFilter, RunStore
from .drivers.jsonb import as_stored
from .drivers.memory import MemoryDriver
from .enqueue import build_jobs
from .errors import InvalidOption, XJobsError
from .options import finite_count, finite_option
from .payload import encode_payload
from .registry import REGISTRY, JobHandle, Registry
from .workers.drive import drive
from .workers.host import Lent, Lifecycle, wind_down
from .workers.queue_worker import QueueWorker

__all__ = ["NotIdle", "NoTransaction", "RunSummary", "STATES", "assert_enqueued",
           "enqueued", "memory_queue", "refute_enqueued", "run_inline", "run_until_idle"]

_FROM_INPUT: Any = object()
_ANY: Any = object()
_ROWS = 100_000          # the most rows one listing answers (the drivers' own row limit)
_NEVER_MS = 3650 * 86_400_000.0     # a retention no test outlives


class NoTransaction(XJobsError):
    code = "X_INLINE_NO_TRANSACTION"


class NotIdle(XJobsError):
    """``run_until_idle`` did not reach idle in time; ``details["summary"]`` is what ran."""

    code = "X_TESTING_NOT_IDLE"


# -- run_inline -----------------------------------------------------------------------------------

class _InlineTransactions:
    """Stands in for the driver behind ``ctx.transaction()`` when no job row exists."""

    def __init__(self, conn: psycopg.Connection[Any] | None) -> None:
        self.conn = conn

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease, tenant: str | None = None, cross_tenant: bool = False,
                        result: Callable[[], bytes | None] | None = None) -> Iterator[psycopg.Connection[Any]]:
        if self.conn is None:
            raise NoTransaction("run_inline has no job row for ctx.transaction() to complete; pass "
                                "conn= (a psycopg connection) to run the body's writes in "
                                "conn.transaction(), or test it with run_until_idle() on a PostgresDriver")
        if not self.conn.autocommit and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            # psycopg's transaction() would begin and COMMIT a transaction of its own here, out
            # of the test's reach; begin the test's transaction so the block is a savepoint in it
            self.conn.execute("select 1")
        with self.conn.transaction():
            yield self.conn


def run_inline(handle: JobHandle, input: Any, *, attempt: int = 1, job_id: int = 1,
               tenant: Any = _FROM_INPUT, signal: RunSignal | None = None,
               conn: psycopg.Connection[Any] | None = None) -> Any:
    """Call ``handle``'s body once with a real ``Ctx``; answer what it returned or raise what it raised.

    ``tenant`` defaults to the job's own ``tenant(input)``. An ``async def`` body runs on a
    fresh event loop (on a helper thread when the caller is itself inside a running loop).
    """
    attempt = finite_count(attempt, "attempt", minimum=1)
    [new] = build_jobs(handle, [input], max_payload_bytes=config.current_settings().max_payload_bytes)
    payload = orjson.loads(as_stored(new.payload))
    ctx = Ctx(job_id=job_id, attempt=attempt, queue=handle.queue,
              tenant=new.tenant if tenant is _FROM_INPUT else tenant, name=handle.name,
              signal=signal if signal is not None else RunSignal(),
              # no steps inline (ctx.step says so): only the transaction is stood in for
              driver=cast(RunStore, _InlineTransactions(conn)), lease=Lease(job_id, 0),
              cross_tenant=handle.cross_tenant)
    if not handle.is_async:
        with running(ctx):       # xjobs.current() answers it, as in a worker
            return handle.fn(ctx, payload)

    async def body() -> Any:
        with running(ctx):
            return await handle.fn(ctx, payload)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(body())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:   # asyncio.run refuses a nested loop
        return pool.submit(lambda: asyncio.run(body())).result()


# -- run_until_idle -------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    """What one ``run_until_idle`` ran: ``jobs[name][outcome]`` counts settled runs."""

    jobs: dict[str, dict[str, int]]
    advanced_ms: float = 0.0     # how far ``with_scheduled`` stepped the clock

    def total(self, outcome: str) -> int:
        return sum(counts.get(outcome, 0) for counts in self.jobs.values())

    completed = property(lambda self: self.total("completed"))
    retried = property(lambda self: self.total("retried"))
    dead = property(lambda self: self.total("dead"))
    interrupted = property(lambda self: self.total("interrupted"))
    snoozed = property(lambda self: self.total("snoozed"))


def run_until_idle(queue: str | Sequence[str] | None = None, *, driver: JobDriver | None = None,
                   registry: Registry | None = None, with_scheduled: bool = False,
                   concurrency: int = 1, timeout: float = 30.0) -> RunSummary:
    """Run the queue(s) (default: every queue of ``registry``) until idle; see the module doc.

    Idle: this worker runs nothing and the driver has no job ready now in those queues
    (due suspensions and lapsed leases are swept first). Jobs another process runs are not
    waited for. ``concurrency=1`` runs one job at a time, in claim order (priority, run_at,
    id). ``timeout`` (seconds) raises ``NotIdle`` for a queue that never empties, e.g. a
    job that enqueues itself again; its running bodies are interrupted, then abandoned.
    """
    driver = driver if driver is not None else config.current_driver()
    registry = registry if registry is not None else REGISTRY
    end = monotonic_ms() + 1000.0 * finite_option(timeout, "timeout", exclusive_minimum=True)
    queues = registry.queues() if queue is None else [queue] if isinstance(queue, str) else list(queue)
    if not queues:
        raise InvalidOption("registry", "no jobs are registered in it, so there is no queue to run")
    clock = driver.clock
    if with_scheduled and (driver.server_clock or not isinstance(clock, ManualClock)):
        raise InvalidOption("with_scheduled", "steps the driver's clock, so it needs a driver built "
                            "with clock=ManualClock() (memory_queue() gives one)")
    stepped = clock if with_scheduled and isinstance(clock, ManualClock) else None
    # poll often (nothing else wakes a memory driver's worker); never prune what a test reads
    settings = config.Settings(poll_ms=10.0, retention_completed_ms=_NEVER_MS, retention_finished_ms=_NEVER_MS,
                               max_result_bytes=config.current_settings().max_result_bytes)
    worker = QueueWorker(driver=cast(JobDriver, Lent(driver)), registry=registry, queues={q: concurrency for q in queues},
                         settings=settings)
    advanced = 0.0

    def idle() -> bool:
        """Nothing runs here and nothing is due; with ``with_scheduled``, the clock is first
        stepped to the next due job while there is one."""
        nonlocal advanced
        if worker.in_flight() > 0 or _due(driver, queues):
            return False
        if stepped is None or (step := _next_due(driver, queues)) is None:
            return True
        stepped.advance(step)
        advanced += step
        return False
    lifecycle = Lifecycle(worker)
    idle_reached = False
    try:
        lifecycle.initialize()
        idle_reached = drive(worker, until=idle, deadline=end, clock=monotonic_ms)
    finally:
        wind_down(lifecycle, monotonic_ms, monotonic_ms() + 1000.0, "run_until_idle stopped",
                  interrupt=not idle_reached)
    summary = RunSummary(worker.stats().jobs, advanced)
    if not idle_reached:
        raise NotIdle(f"queue(s) {', '.join(queues)} still had work after {timeout:g}s; ran {summary.jobs}",
                           summary=summary)
    return summary


def _due(driver: JobDriver, queues: Sequence[str]) -> bool:
    """Whether a job of ``queues`` is ready now, once due suspensions are woken."""
    driver.job_rescue(_ROWS)
    summary = driver.queue_summary()
    return any(summary[q].depth for q in queues if q in summary)


def _next_due(driver: JobDriver, queues: Sequence[str]) -> float | None:
    """Milliseconds from the driver's now to the next ready or suspended job's due time."""
    # a wait without a timeout is suspended until the end of time: only its event wakes it
    times = [view.run_at for q in queues for state in ("ready", "suspended")
             for view in driver.job_list(ListFilter(queue=q, state=state, limit=_ROWS))
             if view.run_at < LATEST_MS]
    if not times:
        return None
    # a microsecond past it: both drivers store times rounded to microseconds
    return max(0.0, min(times) - driver.clock.now_ms()) + 0.001


# -- what was enqueued ----------------------------------------------------------------------------

def enqueued(job: JobHandle | str | None = None, *, driver: JobDriver | None = None,
             states: str | Iterable[str] = LIVE_STATES) -> list[JobView]:
    """The jobs (one name, or all) in ``states`` (default ready, running, suspended; pass
    ``STATES`` for every state), oldest first, each with its decoded ``payload``."""
    driver = driver if driver is not None else config.current_driver()
    wanted = _states(states)
    views = driver.job_list(ListFilter(name=_name(job), limit=_ROWS))
    return [driver.job_get(v.id) for v in reversed(views) if v.state in wanted]


def assert_enqueued(job: JobHandle | str, input: Any = _ANY, *, count: int | None = None,
                    driver: JobDriver | None = None, states: str | Iterable[str] = LIVE_STATES) -> list[JobView]:
    """Fail unless ``job`` was enqueued with ``input`` (compared as the queue stores it), once
    or more, or exactly ``count`` times; answers the matching jobs."""
    matching, everything, what = _matches(job, input, driver, states)
    if (len(matching) != count) if count is not None else not matching:
        wanted = f"exactly {count}" if count is not None else "at least one"
        raise AssertionError(f"expected {wanted} {what}, found {len(matching)}; "
                             f"{_listing(everything, f'{_name(job)!r} jobs in those states')}")
    return matching


def refute_enqueued(job: JobHandle | str, input: Any = _ANY, *, driver: JobDriver | None = None,
                    states: str | Iterable[str] = LIVE_STATES) -> None:
    """Fail if ``job`` was enqueued (with ``input``, when given)."""
    matching, _, what = _matches(job, input, driver, states)
    if matching:
        raise AssertionError(f"expected no {what}, found {len(matching)}; {_listing(matching, 'they are')}")


def _name(job: JobHandle | str | None) -> str | None:
    return job.name if isinstance(job, JobHandle) else job


def _states(states: str | Iterable[str]) -> tuple[str, ...]:
    wanted = (states,) if isinstance(states, str) else tuple(states)
    unknown = set(wanted) - set(STATES)
    if unknown or not wanted:
        raise InvalidOption("states", f"must name some of {', '.join(STATES)}, got {wanted!r}")
    return wanted


def _matches(job: JobHandle | str, input: Any, driver: JobDriver | None,
             states: str | Iterable[str]) -> tuple[list[JobView], list[JobView], str]:
    states = _states(states)
    everything = enqueued(job, driver=driver, states=states)
    what = f"job {_name(job)!r} in state {'|'.join(states)}"
    if input is _ANY:
        return everything, everything, what
    # compare what the queue holds: tuples are lists, keys are reordered, 1e16 is an int
    stored = orjson.loads(as_stored(encode_payload(input, 2**62)))
    return [v for v in everything if v.payload == stored], everything, f"{what} with input {stored!r}"


def _listing(views: list[JobView], header: str, most: int = 10) -> str:
    if not views:
        return f"{header}: none"
    lines = [f"  #{v.id} {v.state} attempt {v.attempt}: {v.payload!r}" for v in views[:most]]
    more = [f"  ... and {len(views) - most} more"] if len(views) > most else []
    return "\n".join([f"{header} ({len(views)}):", *lines, *more])


# -- the process-wide driver ----------------------------------------------------------------------

@contextlib.contextmanager
def memory_queue(*, clock: Clock | None = None) -> Iterator[MemoryDriver]:
    """Point ``xjobs`` (enqueue, ``current_driver()``) at a fresh ``MemoryDriver``; yield it."""
    driver = MemoryDriver(clock=clock if clock is not None else ManualClock(SYSTEM_CLOCK.now_ms()))
    previous = config.swap_driver(driver)
    try:
        yield driver
    finally:
        config.swap_driver(previous)
