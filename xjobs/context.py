"""What a job body receives: ``ctx`` with the run's identity, its stop signal and a logger.

``ctx.signal`` is how a body learns it should stop early: a drain (SIGTERM), a timeout, a lost
lease or an operator's cancel all abort it, and the FIRST reason wins, so a timeout that fired
before the drain still reports as a timeout. The signal belongs to this run alone: a worker
never hands a run a signal that was set for an earlier one.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, TypeVar

from .errors import Aborted, CrossTenantDenied, InvalidOption, LeaseLost, NotConfigured
from .payload import DEFAULT_MAX_RESULT_BYTES, encode_result
from .options import finite_option
from .snooze import Snooze

if TYPE_CHECKING:
    from .drivers.base import Lease, Progress, RunStore
    from .steps import StepOptions, StepRunner

T = TypeVar("T")

_MAX_NOTE = 1000

# abort reasons, as codes; a drained run settles as interrupted, keyed off this value
DRAINED = "X_DRAINING"
TIMED_OUT = "X_JOB_TIMEOUT"
LEASE_LOST = "X_JOB_LEASE_LOST"
CANCELLED = "X_JOB_CANCELLED"
SLOT_LOST = "X_JOB_SLOT_LOST"
STEP_TIMED_OUT = "X_STEP_TIMEOUT"
SETTLED = "X_JOB_SETTLED"     # set once the run is settled: a leftover thread writes nothing
SUSPENDED = "X_JOB_SUSPENDED"       # set once a step suspended the job: the run writes nothing more

_log = logging.getLogger("xjobs.job")


class RunSignal:
    """A one-shot stop flag with a reason: ``is_set()``, ``wait(timeout)``, ``raise_if_set()``.

    The event a waiter blocks on is made only when somebody waits: most bodies never do, and
    a worker running thousands of jobs a second should not build a lock and condition each.
    """

    __slots__ = ("_event", "code", "reason")
    _guard = threading.Lock()

    def __init__(self) -> None:
        self._event: threading.Event | None = None
        self.code: str | None = None
        self.reason: str | None = None

    def abort(self, code: str, reason: str) -> bool:
        """Set the signal; answers False when it was already set (the first reason stands)."""
        with RunSignal._guard:
            if self.code is not None:
                return False
            self.code, self.reason = code, reason
            event = self._event
        if event is not None:
            event.set()
        return True

    def is_set(self) -> bool:
        return self.code is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds; answers True once the run should stop."""
        with RunSignal._guard:
            if self.code is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def raise_if_set(self) -> None:
        if self.code is not None:
            raise Aborted(self.reason or "aborted", code="X_ABORTED", cause=self.code)

    def __repr__(self) -> str:
        return f"<RunSignal {'set: ' + str(self.code) if self.code else 'clear'}>"


class RunLog(logging.LoggerAdapter[logging.Logger]):
    """``ctx.log``: every record carries the run's fields, and the fields a call adds
    (``ctx.log.info("sent", extra={"to": addr})``) are kept beside them, not dropped."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class Fence:
    """The one path of every write a run makes: its step results, its sleeps and waits, and
    ``ctx.transaction()``. Refused with ``X_ABORTED`` once the run's signal is set (the
    first reason stays in ``err.details["cause"]``); a write the database refused (the job is
    no longer running under this claim) sets the signal and is refused the same way, which is
    what unwinds a body that ignores its signal.

    Flags the worker reads: ``refused`` (the database refused a write: the job was cancelled
    or taken back), ``suspending`` (a sleep or a wait is suspending the job: its lease is not
    renewed any more, and the job leaving ``running`` is not a lost lease), ``suspended`` (it
    did: the run settles as suspended and writes nothing), ``committing`` (its
    ``ctx.transaction()`` body is done and the commit that completes the job is in flight: a
    renewal that no longer finds the job running is seeing that commit, not a lost lease) and
    ``completed`` (the commit landed: nothing more may be written for the job)."""

    __slots__ = ("_signal", "refused", "suspending", "suspended", "committing", "completed")

    def __init__(self, signal: RunSignal) -> None:
        self._signal = signal
        self.refused = self.suspending = self.suspended = self.committing = self.completed = False

    def check(self) -> None:
        if self.completed:
            raise Aborted("the job was completed by ctx.transaction(); the run writes nothing more",
                          code="X_ABORTED", cause="X_JOB_COMPLETED")
        self._signal.raise_if_set()

    def write(self, what: str, call: Callable[[], T], accepted: Callable[[T], bool] = bool) -> T:
        self.check()
        answer = call()
        if not accepted(answer):
            self.refuse(what)
        return answer

    def refuse(self, what: str) -> NoReturn:
        self.refused = True
        self._signal.abort(LEASE_LOST, f"{what}: the job is no longer held by this run "
                                       "(cancelled, rescued or handed back); nothing was written")
        raise Aborted(f"{what}: {self._signal.reason}", code="X_ABORTED", cause=self._signal.code)

    def suspend(self) -> None:
        self.suspended = True
        self._signal.abort(SUSPENDED, "the job is suspended until its step is due")



class Ctx:
    """The context of one attempt. ``transaction()`` is the driver's ``job_transaction``."""

    __slots__ = ("job_id", "attempt", "queue", "tenant", "name", "signal", "_driver", "_lease",
                 "_log", "_progress", "_written", "fence",
                 "_step_options", "_steps", "deadline", "_cross_tenant", "traceparent", "_may_cross",
                 "result_limit", "result_set")

    def __init__(self, *, job_id: int, attempt: int, queue: str, tenant: str | None, name: str,
                 signal: RunSignal, driver: "RunStore", lease: "Lease",
                 steps: "StepOptions | None" = None, deadline: float | None = None,
                 traceparent: str | None = None, cross_tenant: bool = False,
                 result_limit: int = DEFAULT_MAX_RESULT_BYTES) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.queue = queue
        self.tenant = tenant
        self.name = name
        self.signal = signal
        self._driver = driver
        self._lease = lease
        self._log: RunLog | None = None
        self._progress: "Progress | None" = None    # the latest report
        self._written: "Progress | None" = None     # the latest that landed
        self.fence = Fence(signal)
        self._step_options = steps
        self._steps: "StepRunner | None" = None
        # when the run must be done, epoch seconds: the job's timeout, lowered by a drain's or a
        # tick's deadline (``bound``); None while nothing bounds it
        self.deadline: float | None = deadline
        self._cross_tenant: str | None = None
        # granted by the job's declaration to this run alone: it dies with the ctx, never the worker's
        self._may_cross = cross_tenant
        self.traceparent = traceparent    # the enqueuing code's trace context (tracing.py)
        self.result_limit = result_limit
        self.result_set: bytes | None = None   # set_result's value, encoded

    def set_result(self, value: object) -> None:
        """The job's result, given ahead of its completion: what a body that completes its job
        in ``ctx.transaction()`` calls inside the block, so the result commits with the job
        (a value returned after that block is too late: the job is already completed).
        Encoded now, so a value JSON cannot carry, or one over ``max_result_bytes``, is refused
        here (``X_RESULT_INVALID``, ``X_RESULT_TOO_LARGE``); None clears it."""
        self.result_set = encode_result(value, self.result_limit)

    def snooze(self, duration: object) -> Snooze:
        """``return ctx.snooze("5m")``: the job runs again after ``duration`` (seconds, or a
        duration string), no attempt spent and no error recorded (``snooze.py``); the same as
        ``raise xjobs.Snooze(duration)``. A bad duration is ``X_SNOOZE_INVALID`` here."""
        return Snooze(duration)

    @property
    def completed_in_transaction(self) -> bool:
        """The body's ``ctx.transaction()`` committed: the job IS completed, nothing more is written."""
        return self.fence.completed

    def remaining(self) -> float:
        """Seconds left before the timeout, the drain or the tick ends the run, whichever is
        first (``math.inf`` while nothing bounds it): do a slice, checkpoint it with a step,
        and let the next attempt or tick go on from there."""
        if self.deadline is None:
            return math.inf
        return max(0.0, self.deadline - time.time())

    def bound(self, deadline: float) -> None:
        """Lower the run's deadline (epoch seconds) to ``deadline``: a drain or a tick began."""
        if self.deadline is None or deadline < self.deadline:
            self.deadline = deadline

    @contextlib.contextmanager
    def cross_tenant(self, reason: str) -> Iterator[None]:
        """The one way a run writes beyond its tenant: ``ctx.transaction()`` inside this block
        sets ``xjobs.cross_tenant`` to ``on`` besides ``xjobs.tenant``, for policies that allow
        it, and the reason is logged. Never implicit: without it a body writes as its tenant.
        Only for a job that declared it (``job(cross_tenant=True)``, or a ``backfill`` over
        ``tenant="none"``): any other run is refused with ``X_TENANCY_CROSS_DENIED``. Nested, the
        inner reason replaces the outer one for its block."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidOption("cross_tenant.reason", "say why the run spans tenants")
        if not self._may_cross:
            raise CrossTenantDenied(f"job {self.name!r} did not declare cross_tenant=True; refused: "
                                    f"{reason}", job=self.name, reason=reason)
        self.log.warning("cross-tenant: %s", reason, extra={"event": "job.cross_tenant", "reason": reason})
        before, self._cross_tenant = self._cross_tenant, reason
        try:
            yield
        finally:
            self._cross_tenant = before

    @property
    def crossing(self) -> str | None:
        """The reason of the ``cross_tenant`` block the run is in, or None: what app code far
        from the body (a session hook, through ``xjobs.current()``) reads to widen its scope."""
        return self._cross_tenant

    @property
    def store(self) -> "RunStore":
        """The driver this run writes through; an optional capability (the backfill ledger,
        ``drivers/ledger.py``) is looked up on it."""
        return self._driver

    @property
    def steps_used(self) -> "StepRunner | None":
        """The run's step runner, if the body used ``ctx.step`` (its counters, its trace)."""
        return self._steps

    @property
    def step(self) -> "StepRunner":
        """Durable steps: ``ctx.step.run(name, fn)``, ``ctx.step.sleep(name, duration)``,
        ``ctx.step.wait_for_event(name, event, key=, timeout=)`` (see ``steps.py``)."""
        if self._steps is None:
            if self._step_options is None:
                raise NotConfigured("ctx.step needs a job row to record steps in; run the job "
                                    "through a worker (testing.run_until_idle), not inline")
            from .steps import StepRunner
            self._steps = StepRunner(store=self._driver, lease=self._lease, attempt=self.attempt,
                                     fence=self.fence, options=self._step_options)
        return self._steps

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the run is: ``ctx.progress(40, 100, "page 40")``. Never blocks: the
        worker writes the latest report at most once a second, fenced on this run's lease, so
        ``xjobsd jobs show`` and ``xjobsd status --json`` show it. Refused (``X_ABORTED``) once
        the run was told to stop."""
        from .drivers.base import Progress
        self.fence.check()
        done = finite_option(done, "progress.done")
        if total is not None:
            total = finite_option(total, "progress.total")
        if note is not None:
            if not isinstance(note, str) or "\x00" in note:
                raise InvalidOption("progress.note", "must be a string without NUL characters")
            note = note[:_MAX_NOTE]
        self._progress = Progress(self._lease, done, total, note, time.time() * 1000.0)

    def pending_progress(self) -> "Progress | None":
        """The latest report, unless it was written already (the worker's side of ``progress``)."""
        report = self._progress
        return None if report is self._written else report

    def progress_written(self, report: "Progress") -> None:
        self._written = report   # a newer report than this one stays pending

    @property
    def last_progress(self) -> "Progress | None":
        return self._progress

    @property
    def log(self) -> RunLog:
        if self._log is None:
            self._log = RunLog(_log, {"job_id": self.job_id, "job": self.name, "queue": self.queue,
                                      "attempt": self.attempt, "tenant": self.tenant})
        return self._log

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A database connection in a transaction that also completes this job on commit.

        The body's writes and the job's completion land together or not at all: if this
        worker no longer holds the job (cancelled, lease lost) the transaction rolls back
        and is refused like every write of a stopped run: ``X_ABORTED`` (cause
        ``X_JOB_LEASE_LOST``). Only for jobs whose tables share the queue's database.

        The run's tenant is set for the transaction (``current_setting('xjobs.tenant')``; empty
        for a job with ``tenant="none"``), so row-level security policies scope the body's
        writes; see ``cross_tenant`` for the explicit escape.
        """
        self.fence.check()
        try:
            with self._driver.job_transaction(self._lease, tenant=self.tenant,
                                              cross_tenant=self._cross_tenant is not None,
                                              result=lambda: self.result_set) as conn:
                yield conn
                self.fence.committing = True
        except LeaseLost:
            self.fence.committing = False
            self.fence.refuse("ctx.transaction()")
        except BaseException:
            self.fence.committing = False
            raise
        self.fence.completed = True    # before committing clears: a renewal never sees neither
        self.fence.committing = False

    def __repr__(self) -> str:
        return f"<Ctx job={self.name}#{self.job_id} attempt={self.attempt} queue={self.queue}>"


_current: contextvars.ContextVar[Ctx | None] = contextvars.ContextVar("xjobs_current_run", default=None)


def current() -> Ctx | None:
    """The run whose body is executing here (``def`` and ``async def`` alike), or None outside
    one: app code far from the body (an ORM hook, a log filter) reads its job id, name, queue,
    attempt, tenant and deadline without being handed ``ctx``."""
    return _current.get()


@contextlib.contextmanager
def running(ctx: Ctx) -> Iterator[None]:
    """Make ``ctx`` the current run for the body's duration, and forget it after: a pool
    thread or an event-loop task never shows the next run an earlier one."""
    token = _current.set(ctx)
    try:
        yield
    finally:
        _current.reset(token)
