"""The one execution path of a claimed job.

``Executor.submit_many(runs)`` runs the bodies: a ``def`` on a bounded pool of threads, an
``async def`` on one event-loop thread. When a body returns or raises, its thread hands
``(run, error)`` to ``Results``, which wakes the worker's loop; there the ``Settler``
(``workers/settle.py``) calls ``settlement_for(run, error)`` (``verdict.py``), which reads the
outcome and returns what to write. A body's ``Snooze``, raised or returned (``ctx.snooze``),
is handed over as its error.
Settlement is therefore never part of the ``try`` around the body: a failing ack is a
settle failure (the lease lapses and the job is delivered again), never a retry.

What a finished run comes to (completed, snoozed, interrupted, retried, dead, or nothing to
write) is decided in ``verdict.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, ContextManager, Iterator, Protocol

from ..context import Ctx, RunSignal, running
from ..drivers.base import ClaimedJob, Lease, RunStore
from ..errors import JobTimeout, StepSuspension
from ..retry import ErrorTypes, Retry
from ..payload import DEFAULT_MAX_RESULT_BYTES, encode_result
from ..tracing import mark_suspended, run_span
from ..snooze import Snooze, SnoozePolicy
from ..steps import StepOptions

class Handle(Protocol):
    """What a run needs of its job's declaration (``registry.JobHandle``, or ``UnknownJob``)."""

    is_async: bool
    timeout_ms: float | None
    step_timeout_ms: float | None
    event_poll_ms: float | None
    retry: Retry
    retry_on: ErrorTypes
    terminal_on: ErrorTypes
    cross_tenant: bool
    snoozing: SnoozePolicy

    def fn(self, ctx: Ctx, payload: Any) -> Any: ...


class UnknownJob:
    """Stands in for a handle when a claimed job's name has no handler in this process: the
    run is settled as a failure at once, its body is never called."""

    is_async = False
    timeout_ms: float | None = None
    step_timeout_ms: float | None = None
    event_poll_ms: float | None = None
    retry_on: ErrorTypes = ()
    terminal_on: ErrorTypes = ()
    cross_tenant = False
    snoozing = SnoozePolicy()

    def __init__(self, name: str, retry: Retry) -> None:
        self.name = name
        self.retry = retry

    def fn(self, ctx: Ctx, payload: Any) -> Any:
        raise LookupError(f"no handler for job {self.name!r}")


RunHook = Callable[[Ctx], ContextManager[Any]]   # what wraps every run (``QueueWorker(context=)``)


class Run:
    """One attempt of one job, owned by the worker's loop thread."""

    __slots__ = ("job", "handle", "lease", "signal", "ctx", "started_ms", "deadline_ms",
                 "settled", "future", "renewed_ms", "slot_renewed_ms", "code_at_return", "step_deadline_ms",
                 "_clock", "_poke", "hook", "result")

    def __init__(self, job: ClaimedJob, handle: Handle, driver: RunStore, now_ms: float, *,
                 clock: Callable[[], float], poke: Callable[[], None] | None = None,
                 hook: RunHook | None = None, result_limit: int = DEFAULT_MAX_RESULT_BYTES) -> None:
        self.job = job
        self.handle = handle
        self.lease = Lease(job.id, job.token)
        self.signal = RunSignal()
        self._clock = clock
        self._poke = poke
        self.step_deadline_ms: float | None = None    # the running step.run's ceiling, if any
        steps = StepOptions(is_async=handle.is_async, step_timeout_ms=handle.step_timeout_ms,
                            event_poll_ms=handle.event_poll_ms,
                            arm=self._arm_step, first_claim=job.first_claim)
        self.hook = hook
        timeout_ms = handle.timeout_ms
        self.ctx = Ctx(job_id=job.id, attempt=job.attempt, queue=job.queue, tenant=job.tenant,
                       name=job.name, signal=self.signal, driver=driver, lease=self.lease, steps=steps,
                       deadline=None if timeout_ms is None else time.time() + timeout_ms / 1000.0,
                       traceparent=job.traceparent, cross_tenant=handle.cross_tenant,
                       result_limit=result_limit)
        self.result: bytes | None = None   # what the body returned, encoded once in its thread
        self.started_ms = now_ms
        self.renewed_ms, self.slot_renewed_ms = now_ms, float("inf")   # last confirmed (inf: no slot)
        self.deadline_ms: float | None = None if timeout_ms is None else now_ms + timeout_ms
        self.settled = False
        self.future: asyncio.Task[BaseException | None] | None = None
        # the signal as the body left it: a drain that arrives after a body already failed
        # must not turn that failure into an "interrupted" run
        self.code_at_return: str | None = None

    def seconds(self, now_ms: float) -> float:
        """How long the run took, for the duration histogram."""
        return max(0.0, (now_ms - self.started_ms) / 1000.0)

    def _arm_step(self, timeout_ms: float | None) -> None:
        """From the body's thread: a ``step.run`` with a ceiling started (or ended); the loop
        is woken so it times the step from now."""
        self.step_deadline_ms = None if timeout_ms is None else self._clock() + timeout_ms
        if timeout_ms is not None and self._poke is not None:
            self._poke()

    def due_ms(self) -> float | None:
        """The nearest ceiling of this run: its own timeout, or its running step's."""
        step, run = self.step_deadline_ms, self.deadline_ms
        if step is None or run is None:
            return run if step is None else step
        return min(step, run)


def _around(run: Run) -> ContextManager[Any]:
    """What a body runs inside: the app's hook (a session, log fields), when it gave one."""
    return run.hook(run.ctx) if run.hook is not None else contextlib.nullcontext()


# A suspension (StepSuspension) is caught INSIDE the app's hook and the run's span, and answered from
# there: it is how an attempt ends normally while its job waits, so neither the hook nor the
# span may see it as an exception (an error span, a failure in the app's own bookkeeping). A
# snooze, raised or returned, is answered from there too, for the same reason.

def _call_sync(run: Run) -> BaseException | None:
    try:
        with running(run.ctx), run_span(run.ctx) as span, _around(run):
            try:
                value = run.handle.fn(run.ctx, run.job.payload)
                if isinstance(value, Snooze):
                    return value
                run.result = encode_result(value, run.ctx.result_limit)
            except StepSuspension as suspension:
                mark_suspended(span, suspension.step, suspension.wake_at)
                return suspension
            except Snooze as snooze:
                return snooze
    except BaseException as exc:  # a body's SystemExit must not take the worker thread down
        return exc
    return None


async def _call_async(run: Run) -> BaseException | None:
    # a task runs in a copy of the context it was created in: what is set here stays here
    try:
        with running(run.ctx), run_span(run.ctx) as span, _around(run):
            try:
                value = await run.handle.fn(run.ctx, run.job.payload)
                if isinstance(value, Snooze):
                    return value
                run.result = encode_result(value, run.ctx.result_limit)
            except StepSuspension as suspension:
                mark_suspended(span, suspension.step, suspension.wake_at)
                return suspension
            except Snooze as snooze:
                return snooze
    except BaseException as exc:
        return exc
    return None


class Executor:
    """Runs bodies; reports ``done(run, error)`` from whichever thread finished them.

    ``submit_many`` hands a whole claimed batch over at once: one lock for the thread pool,
    one wake-up of the event loop for every async body in the batch. The pool grows on
    demand up to ``size`` threads, so a worker configured for 500 slots that only ever runs
    10 jobs at once holds 10 threads.
    """

    def __init__(self, size: int, done: Callable[[Run, BaseException | None], None],
                 name: str = "xjobs") -> None:
        self._size = size
        self._done = done
        self._name = name
        self._queue: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._closed = False

    def submit_many(self, runs: list[Run]) -> None:
        sync = [run for run in runs if not run.handle.is_async]
        if len(sync) != len(runs):
            loop = self._loop or self._start_loop()
            loop.call_soon_threadsafe(self._start_tasks, [run for run in runs if run.handle.is_async])
        if not sync:
            return
        with self._lock:
            reuse = min(self._idle, len(sync))
            self._idle -= reuse
            spawn = min(len(sync) - reuse, self._size - len(self._threads))
            for _ in range(spawn):
                thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads)}",
                                          daemon=True)
                self._threads.append(thread)
                thread.start()
        put = self._queue.put
        for run in sync:
            put(run)

    def cancel(self, run: Run) -> None:
        """Cancel an async body (a timeout); a thread cannot be stopped, only signalled.

        Done on the loop thread, after any pending start of the same run, so a run whose
        task did not exist yet is either skipped by ``_start_tasks`` or cancelled here.
        """
        if run.handle.is_async and self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_on_loop, run)

    @staticmethod
    def _cancel_on_loop(run: Run) -> None:
        if run.future is not None:
            run.future.cancel()

    def _serve(self) -> None:
        get, done = self._queue.get, self._done
        while True:
            run = get()
            if run is None:
                return
            error = _call_sync(run)
            with self._lock:
                self._idle += 1
            done(run, error)

    def _start_tasks(self, runs: list[Run]) -> None:
        """On the loop thread: one task per async body."""
        create = asyncio.get_running_loop().create_task
        for run in runs:
            if run.signal.code is not None:  # timed out (or lost) before it ever started
                self._done(run, JobTimeout("stopped before it started"))
                continue
            task = create(_call_async(run))
            task.add_done_callback(functools.partial(self._task_done, run))
            run.future = task

    def _task_done(self, run: Run, task: "asyncio.Task[BaseException | None]") -> None:
        if task.cancelled():
            self._done(run, JobTimeout("cancelled by its timeout"))
        else:
            self._done(run, task.result())

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop async bodies run on, started on first use (async worker hooks run there too)."""
        return self._loop or self._start_loop()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=f"{self._name}-loop", daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def shutdown(self) -> None:
        """Stop idle threads; a body still running is abandoned, not joined."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)


class Results:
    """Finished bodies, handed from their threads to the worker's loop thread.

    ``put`` may be called from any thread (it is the executor's ``done``); a byte on a pipe
    wakes the loop (``fileno()`` is one of the worker's wake-up fds), written once per batch
    of results, not once per result. ``drain`` runs on the loop thread.
    """

    def __init__(self) -> None:
        self._queue: deque[tuple[Run, BaseException | None]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poked = False
        self._lock = threading.Lock()   # a poke never writes to a closed (maybe reused) fd
        self._closed = False

    def fileno(self) -> int:
        return self._wake_r

    def put(self, run: Run, error: BaseException | None) -> None:
        # the signal as the body left it: a drain after the body returned does not change it
        run.code_at_return = run.signal.code
        self._queue.append((run, error))
        self.poke()

    def poke(self) -> None:
        """Wake the loop (from any thread): a result waits, or a run's deadline moved."""
        if not self._poked:
            self._poked = True
            with self._lock:
                if self._closed:
                    return
                try:
                    os.write(self._wake_w, b"!")
                except (BlockingIOError, OSError):
                    pass

    def waiting(self) -> bool:
        """Whether results wait to be drained."""
        return bool(self._queue)

    def drain(self) -> Iterator[tuple[Run, BaseException | None]]:
        """Every result handed over so far, and any that arrive while this is consumed."""
        # read first, then clear: a body that pokes between the two leaves a byte behind (a
        # spurious wake-up), never a raised flag over an empty pipe (a lost one)
        try:
            while not self._closed and os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        self._poked = False
        while self._queue:
            yield self._queue.popleft()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
