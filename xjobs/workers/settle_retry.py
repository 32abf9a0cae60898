"""Settlement writes that failed, tried again until their leases lapse.

A body that finished has done its work; what is left is one write (an ack, a nack). When
that write fails on a broken connection (a killed backend, a restarted server, a network
reset) the job is still running under this worker's claim, so the same write, fenced on the
same claim token, is simply tried again on another connection of the pool (the pool drops a
broken one when it comes back). A retry can never overwrite another worker's run: the fence
matches only while this claim holds the row, and after a rescue it matches nothing.

::

    write fails ──hold──> unwritten ──retry (backoff)──> lands: counted as it would have been
                             │   ^                │
                             │   └── fails ───────┘
                             └── its lease lapsed (no renewal for a whole window): given up,
                                 job.settle.failed; the job runs again after the rescue

While a write waits its runs' leases are renewed with the others (``RunTable.settling``), so
a write is given up only when no renewal lands for a whole lease window either: the worker
is then cut off from the database, which a lapse of any of its runs would show anyway. A
failed settlement alone never lets a lease lapse, so it never makes its jobs crash suspects,
and it never spends an attempt (the write it retries is the one that was decided).
"""

from __future__ import annotations

import logging
from typing import Callable

from ..logs import event
from ..retry import Retry
from .execute import Run
from .runs import RunTable
from .stats import WorkerStats

log = logging.getLogger("xjobs.worker")

# how long a write waits before each new try: 50 ms doubling to 2 s (the package's one curve)
_BACKOFF = Retry(attempts=1000, delay="50ms", max_delay="2s", backoff="exponential", jitter=False)


class _Unwritten:
    """One write that has not landed: its runs, how to try it, and when to try it next."""

    __slots__ = ("runs", "attempt", "what", "tries", "retry_at")

    def __init__(self, runs: list[Run], attempt: Callable[[], None], what: str, retry_at: float) -> None:
        self.runs = runs
        self.attempt = attempt
        self.what = what
        self.tries = 1
        self.retry_at = retry_at


class SettleRetries:
    def __init__(self, *, runs: RunTable, stats: WorkerStats, lease_ms: float, identity: str) -> None:
        self._runs = runs
        self._stats = stats
        self._lease_ms = lease_ms
        self._identity = identity
        self._waiting: list[_Unwritten] = []

    def write(self, runs: list[Run], attempt: Callable[[], None], what: str, now_ms: float) -> None:
        """``attempt()`` writes and counts what landed; it raises when the write failed, which
        holds it for a retry."""
        try:
            attempt()
        except Exception as exc:
            self._hold(_Unwritten(runs, attempt, what, now_ms + _BACKOFF.curve_ms(1)), exc, now_ms)

    def retry(self, now_ms: float) -> None:
        """Try again every write whose retry is due; give up those whose leases lapsed."""
        due = [w for w in self._waiting if now_ms >= w.retry_at]
        for unwritten in due:
            self._waiting.remove(unwritten)
            self._runs.forget_settling(unwritten.runs)
            try:
                unwritten.attempt()
            except Exception as exc:
                unwritten.tries += 1
                unwritten.retry_at = now_ms + _BACKOFF.curve_ms(unwritten.tries)
                self._hold(unwritten, exc, now_ms)
            else:
                log.info("worker %s: %s landed after %d tries", self._identity, unwritten.what,
                         unwritten.tries)

    def give_up(self, now_ms: float) -> None:
        """At close: whatever has not landed is left to its leases."""
        for unwritten in list(self._waiting):
            self._waiting.remove(unwritten)
            self._runs.forget_settling(unwritten.runs)
            self._failed(unwritten, "the worker is closing")

    def next_due(self) -> float | None:
        return min((w.retry_at for w in self._waiting), default=None)

    def waiting(self) -> int:
        """How many runs have a settlement still to land."""
        return sum(len(w.runs) for w in self._waiting)

    def _hold(self, unwritten: _Unwritten, exc: Exception, now_ms: float) -> None:
        lapsed = min(run.renewed_ms for run in unwritten.runs) + self._lease_ms
        if now_ms >= lapsed:
            self._failed(unwritten, f"no renewal landed for a whole lease window: {exc}")
            return
        if unwritten.tries == 1:
            log.warning("worker %s: %s failed, trying again until its lease lapses: %s",
                        self._identity, unwritten.what, exc)
        self._waiting.append(unwritten)
        self._runs.hold_settling(unwritten.runs)

    def _failed(self, unwritten: _Unwritten, why: str) -> None:
        runs = unwritten.runs
        event(log, logging.ERROR, "job.settle.failed", "worker %s: %s failed after %d tries (%s); the "
              "lease lapses and the job runs again", self._identity, unwritten.what, unwritten.tries, why,
              count=len(runs), tries=unwritten.tries, error=why, job_ids=[r.job.id for r in runs[:100]],
              worker=self._identity)
        self._stats.bump("settle_failed", len(runs))


__all__ = ["SettleRetries"]
