"""Lease keeping for the queue worker: renewal, and deciding a lease is lost.

A lease is HELD, not owned. It is lost when the database no longer matches it (an operator
cancelled the job, a sweep rescued it, a supervisor handed it back) or when no renewal has
landed for a whole lease window, measured on this process's clock. The window is checked on
EVERY pass, and the pass is scheduled for the moment a window would close, so a worker whose
renewals keep failing stops a run no later than the database gives its job away.

A lost run's signal is aborted and the run is settled as "nothing to write": whatever the
body does afterwards is somebody else's job now.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

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
