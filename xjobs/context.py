"""What a job body receives: ``ctx`` with the run's identity, its stop signal and a logger.

``ctx.signal`` is how a body learns it should stop early: a drain (SIGTERM), a timeout, a lost
lease or an operator's cancel all abort it, and the FIRST reason wins, so a timeout that fired
before the drain still reports as a timeout. The signal belongs to this run alone: a worker
never hands a run a signal that was set for an earlier one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator

from .errors import Aborted, InvalidOption
from .options import finite_option

if TYPE_CHECKING:
    from .drivers.base import JobTransactions, Lease, Progress

_MAX_NOTE = 1000

# abort reasons, as codes; a drained run settles as interrupted, keyed off this value
DRAINED = "X_DRAINING"
TIMED_OUT = "X_JOB_TIMEOUT"
LEASE_LOST = "X_JOB_LEASE_LOST"
CANCELLED = "X_JOB_CANCELLED"
SLOT_LOST = "X_JOB_SLOT_LOST"

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


class Ctx:
    """The context of one attempt. ``transaction()`` is the driver's ``job_transaction``."""

    __slots__ = ("job_id", "attempt", "queue", "tenant", "name", "signal", "_driver", "_lease",
                 "_log", "completed_in_transaction", "_progress", "_written")

    def __init__(self, *, job_id: int, attempt: int, queue: str, tenant: str | None, name: str,
                 signal: RunSignal, driver: "JobTransactions", lease: "Lease") -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.queue = queue
        self.tenant = tenant
        self.name = name
        self.signal = signal
        self._driver = driver
        self._lease = lease
        self._log: logging.LoggerAdapter | None = None
        self.completed_in_transaction = False
        self._progress: "Progress | None" = None    # the latest report
        self._written: "Progress | None" = None     # the latest that landed

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """Report how far the run is: ``ctx.progress(40, 100, "page 40")``. Never blocks: the
        worker writes the latest report at most once a second, fenced on this run's lease, so
        ``xjobsd jobs show`` and ``xjobsd status --json`` show it. Refused (``X_ABORTED``) once
        the run was told to stop."""
        from .drivers.base import Progress
        self.signal.raise_if_set()
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
    def log(self) -> logging.LoggerAdapter:
        if self._log is None:
            self._log = logging.LoggerAdapter(_log, {"job_id": self.job_id, "job": self.name,
                                                     "queue": self.queue, "attempt": self.attempt,
                                                     "tenant": self.tenant})
        return self._log

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A database connection in a transaction that also completes this job on commit.

        The body's writes and the job's completion land together or not at all: if this
        worker no longer holds the job (cancelled, lease lost) the transaction rolls back
        with ``X_JOB_LEASE_LOST``. Only for jobs whose tables share the queue's database.
        """
        self.signal.raise_if_set()
        with self._driver.job_transaction(self._lease) as conn:
            yield conn
        self.completed_in_transaction = True

    def __repr__(self) -> str:
        return f"<Ctx job={self.name}#{self.job_id} attempt={self.attempt} queue={self.queue}>"
