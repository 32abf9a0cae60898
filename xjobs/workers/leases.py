"""Lease keeping for the queue worker: renewal, and deciding a lease is lost.

A lease is HELD, not owned. It is lost when the database no longer matches it (an operator
cancelled the job, a sweep rescued it, a supervisor handed it back) or when no renewal has
landed for a whole lease window, measured on this process's clock. The window is checked on
EVERY pass (before and after a renewal), and the pass is scheduled for the moment a window
would close, so a worker whose renewals keep failing stops a run no later than the database
gives its job away. A pass cannot happen while the loop thread is stuck in a database call
(a network stall holds it for up to the pool's timeout), so ``LeaseWatch`` enforces the same
window from a thread of its own: it aborts the run's signal (and cancels an ``async def``
body) on time; the loop settles the run (writes nothing) once it is free again.

A lost run's signal is aborted and the run is settled as "nothing to write": whatever the
body does afterwards is somebody else's job now.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable

from ..context import CANCELLED, LEASE_LOST

if TYPE_CHECKING:
    from .execute import Run

log = logging.getLogger("xjobs.worker")


class LeaseMixin:
    """Mixed into ``QueueWorker``; uses its ``held``, ``driver``, ``settings`` and ``stats_``."""

    def _renewable(self) -> list["Run"]:
        # a run whose transaction already completed the job holds nothing left to renew
        return [r for r in self.held.values() if not r.settled and not r.ctx.completed_in_transaction]

    def _heartbeat(self, now_ms: float) -> None:
        runs = self._renewable()
        if not runs:
            return
        try:
            alive = self.driver.job_heartbeat_many([r.lease for r in runs], self.settings.lease_ms)
        except Exception as exc:
            log.warning("worker %s: lease renewal failed: %s", self.identity, exc)
            return
        for run in runs:
            if run.settled or run.ctx.completed_in_transaction:
                continue
            if run.job.id in alive:
                run.renewed_ms = now_ms
            else:
                self._lost(run, now_ms, "the database no longer matches this lease")

    def _check_windows(self, now_ms: float) -> None:
        window = self.settings.lease_ms
        for run in self._renewable():
            if now_ms - run.renewed_ms >= window:
                self._lost(run, now_ms, "no renewal landed for a whole lease window")

    def _window_due(self) -> float | None:
        """When the oldest renewal's window closes (a pass must happen by then)."""
        runs = self._renewable()
        return min(r.renewed_ms for r in runs) + self.settings.lease_ms if runs else None

    def _lost(self, run: "Run", now_ms: float, why: str) -> None:
        try:
            cancelled = self.driver.job_get(run.job.id).state == "cancelled"
        except Exception:
            cancelled = False
        self._finish(run, now_ms)
        if cancelled:
            run.signal.abort(CANCELLED, "cancelled by an operator")
            self.stats_.outcome(run.job.name, "cancelled", run.seconds(now_ms))
        else:
            run.signal.abort(LEASE_LOST, f"lease lost: {why}")
            self.stats_.bump("lease_lost")
            log.warning("worker %s: lost the lease on %s#%s: %s", self.identity, run.job.name,
                        run.job.id, why)


class LeaseWatch:
    """A thread that aborts runs whose lease window closed, whatever the loop is doing.

    It reads the loop's runs (a snapshot list) and their ``renewed_ms`` on the loop's clock,
    and sleeps until the earliest window closes (at most ``_IDLE_S``).
    Aborting a signal and cancelling an async body are both safe from any thread; everything
    that writes or changes the worker's state stays on the loop thread.
    """

    _IDLE_S = 1.0

    def __init__(self, runs: Callable[[], list["Run"]], lease_ms: float, clock: Callable[[], float],
                 cancel: Callable[["Run"], None]) -> None:
        self._runs = runs
        self._lease_ms = lease_ms
        self._clock = clock
        self._cancel = cancel
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name="xjobs-lease-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def check(self) -> float | None:
        """Abort every run past its window; answers when the next window closes."""
        now = self._clock()
        due: float | None = None
        for run in self._snapshot():
            closes = run.renewed_ms + self._lease_ms
            if now >= closes:
                if run.signal.abort(LEASE_LOST, "lease lost: no renewal landed for a whole lease window"):
                    self._cancel(run)
            elif due is None or closes < due:
                due = closes
        return due

    def _snapshot(self) -> list["Run"]:
        for _ in range(3):
            try:
                return self._runs()
            except RuntimeError:   # the loop changed its table mid-copy: take it again
                continue
        return []

    def _serve(self) -> None:
        while not self._stopped:
            due = self.check()
            wait = self._IDLE_S if due is None else min(self._IDLE_S, max(0.0, due - self._clock()) / 1000.0)
            self._wake.wait(max(wait, 0.005))
            self._wake.clear()
