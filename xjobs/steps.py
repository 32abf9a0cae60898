"""``ctx.step``: durable steps of one run — ``run``, ``sleep`` and ``wait_for_event``.

A job body becomes a durable workflow::

    def onboard(ctx, input):
        user = ctx.step.run("create user", lambda: create_user(input))   # at most once per job
        ctx.step.sleep("grace period", "3d")                             # holds no worker
        paid = ctx.step.wait_for_event("paid", "order.paid", key=input["order"], timeout="7d")
        ...

The rules, and why each holds:

- **Persist, then return.** A ``step.run`` result is written (``step_put``) before ``run``
  returns it, so a later attempt replays the stored result and never calls ``fn`` again; a
  step whose result was not written (the process died in between) runs again: at most once
  once recorded, at least once overall.
- **One read per attempt, none on a first claim.** Recorded steps are read at the first step
  (``step_list``; a first claim has none), and later steps consult that view. Sound because one
  attempt owns the run: every write is fenced on the claim, so a step absent from the view stays
  absent unless this run writes it (and each write updates the view).
- **One write fence.** Every write (a result, a sleep, a wait, ``ctx.transaction()``) goes
  through ``Fence`` (``context.py``): refused with ``X_ABORTED`` once the run's signal is set
  (cancelled, timed out, drained, lease lost, or settled), and refused by the database when
  the job is no longer running under this claim — which also sets the signal. That refusal
  is what unwinds a body that ignores its signal.
- **A failing step records nothing**; its caller sees the body's own error, never one raised
  by bookkeeping, and the attempt fails under the job's retry policy.
- **Suspending is the only suspension.** A sleep or a wait that is not over suspends the job in
  the same transaction that records the step (suspended until its wake-up, its attempt given
  back, no error logged) and raises ``StepSuspension`` to unwind the body.
- **Names are unique within a run**, checked against a set of every name used (so a name
  used 10,000 steps ago is still refused: ``X_STEP_DUPLICATE``); ``trace`` keeps only the
  200 most recent names, for logs, so a run of a million steps holds a bounded list.

One implementation serves ``def`` and ``async def`` bodies: each verb is a generator that
yields what it needs done (a driver call, the user's ``fn``) and ``_drive_sync`` or
``_drive_async`` performs it; in an ``async def`` body the driver calls run on a thread, so a
slow database never blocks the body's event loop, and ``fn`` may be a coroutine function.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, Union

import orjson

from .drivers.base import (Lease, StepLog, StepOutcome, StepRecord, StepResult, StepSleep, StepStore,
                            StepWait)
from .drivers.jsonb import as_stored
from .drivers.refusals import check_event, check_step_name
from .errors import (InvalidOption, PayloadInvalid, PayloadTooLarge, StepDuplicate, StepResultInvalid,
                      StepSuspension)
from .options import duration_ms
from .payload import encode_payload

if TYPE_CHECKING:
    from .context import Fence

MAX_TRACE_NAMES = 200
MAX_RESULT_BYTES = 16 * 1024 * 1024     # a step result is one jsonb value, read back every attempt


@dataclass(frozen=True, slots=True)
class StepOptions:
    """What the run's job declares for its steps, and how a step timeout reaches the worker:
    ``arm(ms)`` starts the ceiling of one ``step.run`` (``None`` ends it); ``first_claim``: no step recorded yet."""

    is_async: bool
    step_timeout_ms: float | None = None
    event_poll_ms: float | None = None
    arm: Callable[[float | None], None] | None = None
    first_claim: bool = False


class _Io:
    """A driver call the plan needs made (on a thread, in an ``async def`` body)."""

    __slots__ = ("call",)

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call


class _Body:
    """The user's ``fn``: called (and awaited, when it answers an awaitable in an async body)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn


_Need = Union[_Io, _Body]
_Plan = Generator[_Need, Any, Any]


class StepRunner:
    """``ctx.step`` of one run. Built lazily by ``Ctx``; belongs to that run alone."""

    def __init__(self, *, store: StepStore, lease: Lease, attempt: int, fence: "Fence",
                 options: StepOptions) -> None:
        self._store = store
        self._lease = lease
        self._attempt = attempt
        self._fence = fence
        self._options = options
        self._recorded: dict[str, StepRecord] | None = {} if options.first_claim else None   # then kept current
        self._used: set[str] = set()
        self._trace: deque[str] = deque(maxlen=MAX_TRACE_NAMES)
        # what this attempt did, for the worker's counters (xjobs_steps_total)
        self.counts = {"run": 0, "replayed": 0, "woke": 0, "delivered": 0, "timed_out": 0}

    @property
    def trace(self) -> tuple[str, ...]:
        """The names of the most recent steps of this attempt (at most 200), oldest first."""
        return tuple(self._trace)

    # -- the verbs --------------------------------------------------------------------------------

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` at most once for this job; answers its JSON result (``await`` it in an
        ``async def`` body, where ``fn`` may be a coroutine function)."""
        if not callable(fn):
            raise InvalidOption("step.run", f"fn must be callable, got {type(fn).__name__}")
        return self._drive(self._run(self._claim(name), fn))

    def sleep(self, name: str, duration: object) -> Any:
        """Suspend the job for ``duration`` (``"3d"``, ``"90s"`` or milliseconds); it holds no worker
        meanwhile and wakes on the database's clock. Returns at once on the replay after."""
        wait_ms = duration_ms(duration, "step.sleep")
        return self._drive(self._sleep(self._claim(name), wait_ms))

    def wait_for_event(self, name: str, event: str, key: str | None = None,
                       timeout: object = None) -> Any:
        """Suspend the job until ``xjobs.send_event(event, key=key, ...)``; answers the event's
        payload. An event sent before the wait began is delivered too (events are stored for
        the configured retention). Answers None when ``timeout`` passes first."""
        event, stored_key = check_event(event, "" if key is None else key)
        timeout_ms = None if timeout is None else duration_ms(timeout, "wait_for_event.timeout")
        return self._drive(self._wait(self._claim(name), event, stored_key, timeout_ms))

    def invoke(self, name: str, job: Any, input: Any, **enqueue_options: Any) -> Any:
        """Enqueue one child job of ``job`` as this step and suspend the job until it settles; answers
        its result, or raises ``X_CHILD_FAILED`` (``children.py``). ``delay``, ``run_at`` and
        ``priority`` are the child's enqueue options."""
        from .children import check_handle, check_options, fan_plan
        handle = check_handle(job, "step.invoke")
        check_options(enqueue_options)
        name = self._claim(name)

        def one() -> _Plan:
            results = yield from fan_plan(self, name, handle, [input], return_exceptions=False,
                                          options=enqueue_options)
            return results[0]
        return self._drive(one())

    def map(self, name: str, job: Any, inputs: Any, *, return_exceptions: bool = False,
            **enqueue_options: Any) -> Any:
        """A child job of ``job`` per input, enqueued in one bulk insert; the parent is suspended ONCE
        and is woken when the last child settles. Answers the results in input order, or
        raises ``X_CHILD_FAILED`` naming the failed indices (``return_exceptions=True``: each
        failure in its place instead)."""
        from .children import check_handle, check_options, fan_plan
        handle = check_handle(job, "step.map")
        check_options(enqueue_options)
        if isinstance(inputs, (str, bytes, dict)) or not hasattr(inputs, "__len__"):
            raise InvalidOption("step.map", "inputs must be a list of inputs")
        if not isinstance(return_exceptions, bool):
            raise InvalidOption("step.map", "return_exceptions must be True or False")
        name = self._claim(name)
        return self._drive(fan_plan(self, name, handle, list(inputs), return_exceptions=return_exceptions,
                                    options=enqueue_options))

    # -- what children.py's plan uses of this run ------------------------------------------------

    @property
    def store(self) -> StepStore:
        return self._store

    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def fence(self) -> "Fence":
        return self._fence

    @staticmethod
    def io(call: Callable[[], Any]) -> _Io:
        return _Io(call)

    def lookup(self, name: str, kind: str) -> Generator[_Need, Any, StepRecord | None]:
        return self._lookup(name, kind)

    def fenced_suspend(self, name: str, write: Callable[[], Any]) -> Any:
        """A fan-out's one transaction, through the fence, as a sleep's is (``_suspend``)."""
        self._fence.check()
        self._fence.suspending = True
        outcome = self._fence.write(f"step {name!r}", write, lambda outcome: not outcome.fenced)
        if not outcome.suspended:
            self._fence.suspending = False
        return outcome

    def suspended(self) -> None:
        self._fence.suspend()

    def remember_map(self, name: str, result: Any) -> None:
        self._remember(StepRecord(name=name, kind="map", state="completed", seq=0, attempt=self._attempt,
                                  result=result, started_at=0.0, finished_at=0.0))

    # -- the plans: one implementation for def and async def bodies --------------------------------

    def _run(self, name: str, fn: Callable[[], Any]) -> _Plan:
        recorded = yield from self._lookup(name, "run")
        if recorded is not None:
            return recorded.result
        self._fence.check()
        arm, ceiling = self._options.arm, self._options.step_timeout_ms
        started = time.perf_counter()
        if arm is not None and ceiling is not None:
            arm(ceiling)
        try:
            value = yield _Body(fn)
        finally:
            if arm is not None and ceiling is not None:
                arm(None)
        # a failing fn propagated above, untouched: nothing is recorded for it
        self.counts["run"] += 1
        encoded = _encode(name, value)
        step = StepResult(name, encoded, self._attempt, (time.perf_counter() - started) * 1000.0)
        yield _Io(lambda: self._fence.write(f"step {name!r}", lambda: self._store.step_put(self._lease, step)))
        stored = orjson.loads(as_stored(encoded))
        self._remember(StepRecord(name=name, kind="run", state="completed", seq=0, attempt=self._attempt,
                                  result=stored, started_at=0.0, finished_at=0.0))
        return stored

    def _sleep(self, name: str, wait_ms: float) -> _Plan:
        recorded = yield from self._lookup(name, "sleep")
        if recorded is not None:
            return None
        sleep = StepSleep(name, wait_ms, self._attempt)
        outcome = yield _Io(lambda: self._suspend(name, lambda: self._store.step_sleep(self._lease, sleep)))
        self._settled(name, "sleep", outcome)
        return None

    def _wait(self, name: str, event: str, key: str, timeout_ms: float | None) -> _Plan:
        recorded = yield from self._lookup(name, "wait")
        if recorded is not None:
            return recorded.result
        wait = StepWait(name, event, key, timeout_ms, self._options.event_poll_ms, self._attempt)
        outcome = yield _Io(lambda: self._suspend(name, lambda: self._store.step_wait(self._lease, wait)))
        self._settled(name, "wait", outcome)
        return outcome.value

    def _lookup(self, name: str, kind: str) -> Generator[_Need, Any, StepRecord | None]:
        """The completed record of ``name`` (a replay), or None: it runs now."""
        if self._recorded is None:
            log: StepLog = yield _Io(lambda: self._store.step_list(self._lease.job_id))
            self._recorded = {step.name: step for step in log.steps}
        recorded = self._recorded.get(name)
        if recorded is not None and recorded.kind != kind:   # the body changed between attempts
            raise StepDuplicate(f"step {name!r} was recorded as a {recorded.kind}; a step name "
                                "means one step")
        if recorded is None or recorded.state != "completed":
            return None     # never reached, or a sleep or a wait that is not over yet
        # a wait completed by its event's send for THIS attempt to pick up is a delivery
        delivered = kind == "wait" and recorded.attempt == self._attempt and not recorded.timed_out
        self.counts["delivered" if delivered else "replayed"] += 1
        return recorded

    def _suspend(self, name: str, write: Callable[[], StepOutcome]) -> StepOutcome:
        """A sleep's or a wait's one transaction, through the fence (a suspension raises below).
        ``suspending`` is raised first: from the moment the transaction may suspend the job, the
        worker neither renews the lease nor takes the job leaving ``running`` for a loss."""
        self._fence.check()
        self._fence.suspending = True
        outcome = self._fence.write(f"step {name!r}", write, lambda outcome: not outcome.fenced)
        if outcome.done:
            self._fence.suspending = False
        return outcome

    def _settled(self, name: str, kind: str, outcome: StepOutcome) -> None:
        if not outcome.done:
            # the job is suspended already (the same transaction recorded the step): no
            # more writes of this run can land, and the body unwinds
            self._fence.suspend()
            raise StepSuspension(name, outcome.wake_at)
        # done now, not replayed: a sleeper that woke, or a wait that got its event or timed out
        self.counts["timed_out" if outcome.timed_out else "woke" if kind == "sleep" else "delivered"] += 1
        self._remember(StepRecord(name=name, kind=kind, state="completed", seq=0, attempt=self._attempt,
                                  result=outcome.value, started_at=0.0, finished_at=0.0,
                                  timed_out=outcome.timed_out))

    # -- names and the view ----------------------------------------------------------------------

    def _claim(self, name: str) -> str:
        name = check_step_name(name)
        if name in self._used:
            raise StepDuplicate(f"step {name!r} is used twice in one run; give every step its own name")
        self._used.add(name)
        self._trace.append(name)
        return name

    def _remember(self, record: StepRecord) -> None:
        if self._recorded is not None:
            self._recorded[record.name] = record

    # -- the two drivers of a plan ----------------------------------------------------------------

    def _drive(self, plan: _Plan) -> Any:
        return _drive_async(plan) if self._options.is_async else _drive_sync(plan)


def _drive_sync(plan: _Plan) -> Any:
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            need = plan.throw(error) if error is not None else plan.send(send)
        except StopIteration as stop:
            return stop.value
        send, error = None, None
        try:
            if isinstance(need, _Io):
                send = need.call()
            else:
                send = need.fn()
                if inspect.isawaitable(send):
                    _close(send)
                    raise InvalidOption("step.run", "fn answered an awaitable in a def body; declare "
                                                    "the job async def to await it")
        except BaseException as exc:   # handed to the plan: a failing fn propagates as itself
            error = exc


# async bodies waiting on step statements at once, each on a thread while its batch is on the
# server: this bounds how many of their results a coalesced batch carries (16 made batches of 16)
_IO_THREADS = 256     # started as first needed; the driver bounds the connections
_io_pool: concurrent.futures.ThreadPoolExecutor | None = None
_io_pool_lock = threading.Lock()


def _io_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that make async bodies' step statements: the event loop's default
    executor has a handful of threads, too few for a worker running hundreds of async bodies."""
    global _io_pool
    with _io_pool_lock:
        if _io_pool is None:
            _io_pool = concurrent.futures.ThreadPoolExecutor(_IO_THREADS, thread_name_prefix="xjobs-steps")
        return _io_pool


async def _drive_async(plan: _Plan) -> Any:
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            need = plan.throw(error) if error is not None else plan.send(send)
        except StopIteration as stop:
            return stop.value
        send, error = None, None
        try:
            if isinstance(need, _Io):
                send = await asyncio.get_running_loop().run_in_executor(_io_executor(), need.call)
            else:
                send = need.fn()
                if inspect.isawaitable(send):
                    send = await send
        except BaseException as exc:
            error = exc


def _close(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()   # never awaited: no "coroutine was never awaited" warning on top of the error


def _encode(name: str, value: Any) -> bytes:
    """The result as JSON, refused exactly where a payload would be (NaN, a set, a cycle,
    over the size bound), before anything is written."""
    try:
        return encode_payload(value, MAX_RESULT_BYTES)
    except (PayloadInvalid, PayloadTooLarge) as exc:
        raise StepResultInvalid(f"step {name!r} returned what cannot be recorded "
                                f"({type(value).__name__}): {exc.args[0]}; nothing was recorded") from None


__all__ = ["MAX_TRACE_NAMES", "StepOptions", "StepRunner"]
