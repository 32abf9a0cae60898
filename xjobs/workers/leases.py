"""The queue worker's lease keeper: renewal, and deciding a lease is lost.

A lease is HELD, not owned. It is lost when the database no longer matches it (an operator
cancelled the job, a sweep rescued it, a supervisor handed it back) or when no renewal has
landed for a whole lease window, measured on this process's clock. ``keep`` renews every
held lease in ONE statement when a renewal is due, which an operator's cancel of a run held
here makes at once (``recall``: the worker's listener heard it, ``pg_listen.py``; a cancel
nobody heard is found by the next renewal), and checks the window on EVERY pass
(before and after a renewal); ``next_due`` schedules the pass for the moment a window would
close, so a worker whose renewals keep failing stops a run no later than the database gives
its job away. A pass cannot happen while the loop thread is stuck in a database call (a
network stall holds it for up to the pool's timeout), so the keeper's ``LeaseWatch`` enforces
the same window from a thread of its own: it aborts the run's signal (and cancels an
``async def`` body) on time; the loop settles the run (writes nothing, or gives the job back
fenced on its lease, see ``settle.py``) once it is free again.

A lost run's signal is aborted and the run is settled as "nothing to write": whatever the
body does afterwards is somebody else's job now.

A capped job's run also holds a fleet-wide slot (``admission.py``), renewed by statements of
its own, so a stall can land between the two renewals. The run's safe window therefore ends
at the EARLIER of its lease's window and its slot's (``window_closes``): the slot's TTL after
its last confirmed renewal, less an allowance for the body to stop, because a peer's
``slot_acquire`` takes an expired slot at once (no rescue pass comes between, as for a job).
When the slot's window closes first the run is told exactly as for a lost lease, by the watch
or by the keeper, whichever looks first; its job's lease, still good, is renewed on until the
body ends, and then the job is handed back, its attempt not counted, and the loss counted
(``settle.py``).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Callable

from ..config import Settings
from ..context import CANCELLED, LEASE_LOST
from ..drivers.base import Cancels, Introspection, JobDriver
from ..logs import event, run_fields
from .execute import Run
from .runs import RunTable
from .stats import WorkerStats

log = logging.getLogger("xjobs.worker")

LEASE_WINDOW = "lease lost: no renewal landed for a whole lease window"
SLOT_WINDOW = "lease lost: no renewal of its fleet-wide slot landed in time, so another process may take it"


def slot_window_ms(settings: Settings) -> float:
    """How long after its last confirmed renewal a run may trust its slot: the slot's TTL (the
    lease) less half the slack the renewal cadence leaves, at most half a heartbeat. A healthy
    cadence (a renewal every heartbeat) never comes near it."""
    lease, heartbeat = settings.lease_ms, settings.heartbeat_ms
    return lease - min(heartbeat, lease - heartbeat) / 2.0


def window_closes(run: Run, lease_ms: float, slot_ms: float) -> tuple[float, str]:
    """When the run's safe window closes (the loop's clock), and why: the earlier of its
    lease's window and its slot's (``slot_renewed_ms`` is inf for a run without one)."""
    lease_at, slot_at = run.renewed_ms + lease_ms, run.slot_renewed_ms + slot_ms
    return (lease_at, LEASE_WINDOW) if lease_at <= slot_at else (slot_at, SLOT_WINDOW)


class LeaseKeeper:
    def __init__(self, *, driver: JobDriver, runs: RunTable, stats: WorkerStats, settings: Settings,
                 identity: str) -> None:
        self._driver = driver
        self._runs = runs
        self._stats = stats
        self._settings = settings
        self._identity = identity
        self._next_renewal = 0.0
        self._slot_ms = slot_window_ms(settings)
        self._watch: LeaseWatch | None = None
        self._cancel: Callable[[Run], None] = lambda run: None

    def start(self, clock: Callable[[], float], cancel: Callable[[Run], None]) -> None:
        """Start the watch thread; ``clock`` is the loop's, ``cancel`` stops an async body."""
        self._cancel = cancel
        self._watch = LeaseWatch(self._runs.renewable, self._settings.lease_ms, clock, cancel,
                                 slot_ms=self._slot_ms)
        self._watch.start()

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

    def keep(self, now_ms: float) -> None:
        """Renew when a renewal is due; let go of every run whose lease is lost."""
        if now_ms >= self._next_renewal:
            self._check_windows(now_ms)   # asked before the renewal and after it
            self._renew(now_ms)
            self._next_renewal = now_ms + self._settings.heartbeat_ms
        self._check_windows(now_ms)

    def recall(self, cancels: Cancels) -> None:
        """A cancel named a run held here, or named none (check them all): renew on this pass.
        The renewal, not the notification, decides: it finds the cancelled job gone, and the
        run is told (``lost``) as a renewal that came due would have told it."""
        if cancels.every or any(self._runs.get(job_id) is not None for job_id in cancels.ids):
            self._next_renewal = -math.inf

    def next_due(self) -> float:
        """When a pass must run for the leases: the next renewal, or the earliest window's close."""
        runs = self._runs.renewable()
        if not runs:
            return self._next_renewal
        lease = self._settings.lease_ms
        return min(self._next_renewal, min(window_closes(r, lease, self._slot_ms)[0] for r in runs))

    def _renew_settling(self, alive: set[int], now_ms: float) -> None:
        """A run whose settlement is still to land keeps its lease while renewals land; one the
        database no longer matches is left to its write, which then lands nowhere and says so."""
        for run in self._runs.settling():
            if run.job.id in alive:
                run.renewed_ms = now_ms

    def lost(self, run: Run, now_ms: float, why: str) -> None:
        """Settle ``run`` as lost: its signal is aborted and nothing it does is written."""
        cancelled = was_cancelled(self._driver, run)
        # the reason first: settling sets the signal too, and the first reason is the one kept
        if cancelled:
            run.signal.abort(CANCELLED, "cancelled by an operator")
        else:
            run.signal.abort(LEASE_LOST, f"lease lost: {why}")
        self._runs.finish(run)
        count_loss(self._stats, self._identity, run, now_ms, why, cancelled)

    def _renew(self, now_ms: float) -> None:
        runs = self._runs.renewable()
        settling = self._runs.settling()
        if not runs and not settling:
            return
        try:
            alive = self._driver.job_renew_many([r.lease for r in runs + settling],
                                                     self._settings.lease_ms)
        except Exception as exc:
            # one failed renewal is not a loss: the window closes only when none lands for a
            # whole lease (checked on every pass)
            event(log, logging.WARNING, "job.lease.renew.failed", "worker %s: renewing %d lease(s) failed: %s",
                  self._identity, len(runs) + len(settling), exc, count=len(runs) + len(settling),
                  error=str(exc), worker=self._identity)
            return
        self._renew_settling(alive, now_ms)
        for run in runs:
            # a suspension that began while the renewal was in flight took the job out of running
            if run.settled or run.ctx.completed_in_transaction or run.ctx.fence.suspending:
                continue
            if run.job.id in alive:
                run.renewed_ms = now_ms
            elif not run.ctx.fence.committing:   # else the body's commit just completed the job
                self.lost(run, now_ms, "the database no longer matches this lease")

    def _check_windows(self, now_ms: float) -> None:
        window = self._settings.lease_ms
        for run in self._runs.renewable():
            if now_ms - run.renewed_ms >= window:
                self.lost(run, now_ms, "no renewal landed for a whole lease window")
            elif now_ms - run.slot_renewed_ms >= self._slot_ms:
                self._slot_lapsed(run)

    def _slot_lapsed(self, run: Run) -> None:
        """The run's slot may be given away: tell the run as the watch would have (it may have
        already). It stays held, its lease renewed, so that the job, once the body ends, is
        handed back at once rather than left to lapse (``Settler.settle``)."""
        run.slot_renewed_ms = math.inf      # told once: a later renewal of the slot changes nothing
        if run.signal.abort(LEASE_LOST, SLOT_WINDOW):
            self._cancel(run)


def was_cancelled(driver: Introspection, run: Run) -> bool:
    """Whether the job a run lost was cancelled by an operator (else it was taken back)."""
    try:
        return driver.job_get(run.job.id).state == "cancelled"
    except Exception:
        return False


def count_loss(stats: WorkerStats, identity: str, run: Run, now_ms: float, why: str, cancelled: bool) -> None:
    """A run that lost its job: an operator's cancel counts as the ``cancelled`` outcome,
    anything else as a lost lease."""
    if cancelled:
        stats.outcome(run.job.name, "cancelled", run.seconds(now_ms))
        event(log, logging.INFO, "job.cancelled", "job %s#%s was cancelled while it ran",
              run.job.name, run.job.id, **run_fields(run.job))
    else:
        stats.bump("lease_lost")
        event(log, logging.ERROR, "job.lease.lost", "worker %s: lost the lease on %s#%s: %s",
              identity, run.job.name, run.job.id, why, why=why, **run_fields(run.job))


class LeaseWatch:
    """A thread that aborts runs whose lease window closed, whatever the loop is doing.

    It reads the loop's runs (a snapshot list) and their ``renewed_ms`` on the loop's clock,
    and sleeps until the earliest window closes (at most ``_IDLE_S``).
    Aborting a signal and cancelling an async body are both safe from any thread; everything
    that writes or changes the worker's state stays on the loop thread.
    """

    _IDLE_S = 1.0

    def __init__(self, runs: Callable[[], list[Run]], lease_ms: float, clock: Callable[[], float],
                 cancel: Callable[[Run], None], *, slot_ms: float = math.inf) -> None:
        """``slot_ms``: how long a run trusts its slot after its last confirmed renewal."""
        self._runs = runs
        self._lease_ms = lease_ms
        self._slot_ms = slot_ms
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
        """Abort every run past its window (its lease's or its slot's); answers when the next
        window closes."""
        now = self._clock()
        due: float | None = None
        for run in self._snapshot():
            closes, why = window_closes(run, self._lease_ms, self._slot_ms)
            if now >= closes:
                if run.signal.abort(LEASE_LOST, why):
                    self._cancel(run)
            elif due is None or closes < due:
                due = closes
        return due

    def _snapshot(self) -> list[Run]:
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


__all__ = ["LeaseKeeper", "LeaseWatch"]
