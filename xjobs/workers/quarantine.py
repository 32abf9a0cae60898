"""Running a worker's suspects apart: jobs that were running when some worker process crashed
(``drivers/base.py``), so that a crash while they run says which of them did it.

A crashed process's jobs are split in two halves (``job_release_worker``); a worker claims a
half (``job_claim_alone``: the first suspect in line and the rest of its group, as many as it
has slots) and runs it with nothing else beside it. A half that ends without crashing is
innocent and done; one that crashes again is halved again, until a poison job runs alone and
its crash is charged to it. Halves go to several worker processes at once where they are idle,
so a crash of a process running N jobs costs about log2(N) rounds, not N runs in a row::

    idle ──poll: job_claim_alone──> reserved ──the worker's other runs end──> running apart
     ^                                 │                                          │
     │                                 ├─ worker stops accepting, or its other    │
     │                                 │  runs outlast a lease: handed back       │
     └──── next group at once <────────┴── every run of the group is settled  <───┘

An idle worker takes any suspect at once; a busy one only a suspect that has waited two polls
(no idle worker came for it), and none while a body it gave up on (timed out, lease lost)
still runs in a thread: that thread could crash the process too, and would keep the group
from ever running apart. While a group is reserved or running the worker claims nothing
else; a busy worker whose runs outlasted a reservation waits ``_HOLD_OFF_LEASES`` lease
windows before it reserves again while busy, so long jobs do not stall its claiming over and
over. Everything here runs on the worker's loop thread.

The quarantine is the worker's claim policy for suspects: it claims them itself, takes each
claimed one in through the worker (``take``, the same path as any claim), starts their bodies
on the worker's executor together, and lets go of them through the settler.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from ..config import Settings
from ..drivers.base import ClaimAlone, ClaimedJob, JobStore
from ..logs import event
from .execute import Executor, Run
from .runs import RunTable
from .settle import Settler
from .stats import WorkerStats

log = logging.getLogger("xjobs.worker")
_HOLD_OFF_LEASES = 4


class Quarantine:
    def __init__(self, *, driver: JobStore, runs: RunTable, settler: Settler, executor: Executor,
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
        self.group: list[Run] = []      # the suspects reserved or running apart
        self.started = False
        self.due = False                # look for the next group now, not at the next poll
        self._busy_hold_off = 0.0       # no reserving while busy before this (loop clock, ms)

    @property
    def holding(self) -> bool:
        return bool(self.group)

    def holds(self, run: Run) -> bool:
        return any(member is run for member in self.group)

    def reserve(self, now_ms: float, queues: list[str]) -> bool:
        """Claim one group of suspects; answers whether one is now held."""
        self.due = False
        in_flight = self._runs.in_flight()
        if self._runs.running_given_up() or (in_flight and now_ms < self._busy_hold_off):
            return False
        waited = 0.0 if in_flight == 0 else 2.0 * self._settings.poll_ms
        for queue in queues:
            room = self._runs.free(queue)
            if room <= 0:
                continue
            try:
                jobs = self._driver.job_claim_alone(ClaimAlone(queue, self._settings.lease_ms, self._identity,
                                                               waited, names=self.names, limit=room))
            except Exception as exc:
                self._stats.bump("claim_failed")
                event(log, logging.WARNING, "worker.claim.failed", "worker %s: claiming suspects on %r "
                      "failed: %s", self._identity, queue, exc, queue=queue, error=str(exc),
                      worker=self._identity, alone=True)
                continue
            self._stats.bump("claimed", len(jobs))
            group = [run for job in jobs if (run := self._take(job, now_ms)) is not None]
            if not group:        # none (or none with a handler here: settled at once)
                continue
            for run in group:
                run.deadline_ms = None   # its timeout starts when its body does
            self.group, self.started = group, False
            log.info("worker %s: running %s apart from other work (caught in a crash of their process)",
                     self._identity, ", ".join(f"{r.job.name}#{r.job.id}" for r in group[:20]))
            self.advance(now_ms, accepting=True)     # at once when nothing else runs
            return True
        return False

    def advance(self, now_ms: float, accepting: bool) -> None:
        """Start the reserved group once nothing else runs; give it back, or let go of it, as
        the diagram says."""
        if not self.group:
            return
        if self.started:
            if all(run.settled for run in self.group):   # every body ended, or timed out or was lost
                self.group, self.due = [], True
            return
        for run in [r for r in self.group if r.settled]:     # lost before it ever started
            self._runs.vacate(run)
            self.group.remove(run)
        if not self.group:
            return
        if not accepting or now_ms - min(r.started_ms for r in self.group) >= self._settings.lease_ms:
            why = ("the worker stopped before running it apart" if not accepting else
                   "its worker's other runs did not end within a lease window")
            if accepting:
                self._busy_hold_off = now_ms + _HOLD_OFF_LEASES * self._settings.lease_ms
            group, self.group = self.group, []
            for run in group:
                self._runs.vacate(run)
                self._settler.give_back(run, why, now_ms)
        elif self._runs.in_flight() == len(self.group):
            for run in self.group:
                run.started_ms = now_ms     # its lease was renewed all along; only the body starts now
                timeout = run.handle.timeout_ms
                run.deadline_ms = None if timeout is None else now_ms + timeout
            self.started = True
            self._executor.submit_many(list(self.group))


__all__ = ["Quarantine"]
