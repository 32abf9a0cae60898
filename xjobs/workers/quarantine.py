"""Running a worker's suspects alone: jobs that were running when some worker process crashed
(``drivers/base.py``), so that a crash while one runs is provably its own.

::

    idle ──poll: job_claim_alone──> reserved ──the worker's other runs end──> running alone
     ^                                 │                                          │
     │                                 ├─ worker stops accepting, or its other    │
     │                                 │  runs outlast a lease: given back        │
     └──── next suspect at once <──────┴── its run is settled (its body ended, ───┘
                                           it timed out, or its lease was lost)

An idle worker takes any suspect at once; a busy one only a suspect that has waited two polls
(no idle worker came for it), and none while a body it gave up on (timed out, lease lost)
still runs in a thread: that thread could crash the process too, and would keep the suspect
from ever running alone. While a suspect is reserved or running the worker claims nothing
else; a busy worker whose runs outlasted a reservation waits ``_HOLD_OFF_LEASES`` lease
windows before it reserves again while busy, so long jobs do not stall its claiming over and
over. Everything here runs on the worker's loop thread.

The quarantine is the worker's claim policy for suspects: it claims them itself
(``job_claim_alone``), takes a claimed one in through the worker (``take``, the same path as
any claim), starts its body on the worker's executor, and lets go of one through the settler.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from ..config import Settings
from ..drivers.base import ClaimedJob
from .execute import Executor, Run
from .runs import RunTable
from .settle import Settler
from .stats import WorkerStats

log = logging.getLogger("xjobs.worker")
_HOLD_OFF_LEASES = 4


class Quarantine:
    def __init__(self, *, driver: Any, runs: RunTable, settler: Settler, executor: Executor,
                 take: Callable[[ClaimedJob, float], Run | None], stats: WorkerStats,
                 settings: Settings, identity: str) -> None:
        """``take`` holds a claimed job and answers its run (``QueueWorker.take``), or None
        when it was settled at once (nothing here can run it)."""
        self._driver = driver
        self._runs = runs
        self._settler = settler
        self._executor = executor
        self._take = take
        self._stats = stats
        self._settings = settings
        self._identity = identity
        self.names: Sequence[str] | None = None     # the job names the worker runs (claims filter on them)
        self.run: Run | None = None     # the suspect reserved or running alone
        self.started = False
        self.due = False                # look for the next suspect now, not at the next poll
        self._busy_hold_off = 0.0       # no reserving while busy before this (loop clock, ms)

    @property
    def holding(self) -> bool:
        return self.run is not None

    def reserve(self, now_ms: float, queues: list[str]) -> bool:
        """Claim one suspect; answers whether one is now held."""
        self.due = False
        in_flight = self._runs.in_flight()
        if self._runs.running_given_up() or (in_flight and now_ms < self._busy_hold_off):
            return False
        waited = 0.0 if in_flight == 0 else 2.0 * self._settings.poll_ms
        for queue in queues:
            try:
                jobs = self._driver.job_claim_alone(queue, self._settings.lease_ms, self._identity, waited,
                                                    names=self.names)
            except Exception as exc:
                log.warning("worker %s: claiming a suspect on %r failed: %s", self._identity, queue, exc)
                continue
            if not jobs:
                continue
            self._stats.bump("claimed")
            run = self._take(jobs[0], now_ms)
            if run is None:      # no handler here: it was settled at once
                continue
            run.deadline_ms = None   # its timeout starts when its body does
            self.run, self.started = run, False
            log.info("worker %s: running %s#%s alone (its last run was caught in a crash)",
                     self._identity, run.job.name, run.job.id)
            self.advance(now_ms, accepting=True)     # at once when nothing else runs
            return True
        return False

    def advance(self, now_ms: float, accepting: bool) -> None:
        """Start the reserved suspect once nothing else runs; give it back, or let go of it,
        as the diagram says."""
        run = self.run
        if run is None:
            return
        if self.started:
            if run.settled:   # its body ended, or it timed out or was lost while its body runs on
                self.run, self.due = None, True
            return
        if run.settled:       # lost before it ever started
            self._runs.vacate(run)
            self.run = None
        elif not accepting or now_ms - run.started_ms >= self._settings.lease_ms:
            why = ("the worker stopped before running it alone" if not accepting else
                   "its worker's other runs did not end within a lease window")
            if accepting:
                self._busy_hold_off = now_ms + _HOLD_OFF_LEASES * self._settings.lease_ms
            self._runs.vacate(run)
            self.run = None
            self._settler.give_back(run, why, now_ms)
        elif self._runs.in_flight() == 1:
            run.started_ms = now_ms     # its lease was renewed all along; only the body starts now
            timeout = run.handle.timeout_ms
            run.deadline_ms = None if timeout is None else now_ms + timeout
            self.started = True
            self._executor.submit_many([run])


__all__ = ["Quarantine"]
