"""Running a worker's suspects alone: jobs that were running when some worker process crashed
(``drivers/base.py``), so that a crash while one runs is provably its own.

::

    idle ──poll: job_claim_alone──> reserved ──the worker's other runs end──> running alone
     ^                                 │                                          │
     │                                 ├─ worker stops accepting, or its other     │
     │                                 │  runs outlast a lease: given back         │
     └──── next suspect at once <──────┴──────── its body ends (or it times out) ──┘

An idle worker takes any suspect at once; a busy one only a suspect that has waited two polls
(no idle worker came for it), and none while a body it gave up on (timed out, lease lost)
still runs in a thread: that thread could crash the process too, and would keep the suspect
from ever running alone. While a suspect is reserved or running the worker claims nothing
else; a busy worker whose runs outlasted a reservation waits ``_HOLD_OFF_LEASES`` lease
windows before it reserves again while busy, so long jobs do not stall its claiming over and
over. Everything here runs on the worker's loop thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .execute import Run
    from .queue_worker import QueueWorker

log = logging.getLogger("xjobs.worker")
_HOLD_OFF_LEASES = 4


class Quarantine:
    def __init__(self, worker: "QueueWorker") -> None:
        self.worker = worker
        self.run: "Run | None" = None   # the suspect reserved or running alone
        self.started = False
        self.due = False                # look for the next suspect now, not at the next poll
        self._busy_hold_off = 0.0       # no reserving while busy before this (loop clock, ms)

    @property
    def holding(self) -> bool:
        return self.run is not None

    def reserve(self, now_ms: float, queues: list[str]) -> bool:
        """Claim one suspect; answers whether one is now held."""
        worker = self.worker
        self.due = False
        live = sum(1 for run in worker.held.values() if not run.settled)
        if worker.in_flight() > live or (worker.in_flight() and now_ms < self._busy_hold_off):
            return False
        waited = 0.0 if worker.in_flight() == 0 else 2.0 * worker.settings.poll_ms
        for queue in queues:
            try:
                jobs = worker.driver.job_claim_alone(queue, worker.settings.lease_ms, worker.identity, waited)
            except Exception as exc:
                log.warning("worker %s: claiming a suspect on %r failed: %s", worker.identity, queue, exc)
                continue
            if not jobs:
                continue
            worker.stats_.bump("claimed")
            run = worker._start(jobs[0], now_ms)
            if run is None:      # no handler here: it was settled at once
                continue
            run.deadline_ms = None   # its timeout starts when its body does
            self.run, self.started = run, False
            log.info("worker %s: running %s#%s alone (its last run was caught in a crash)",
                     worker.identity, run.job.name, run.job.id)
            self.advance(now_ms)     # at once when nothing else runs
            return True
        return False

    def advance(self, now_ms: float) -> None:
        """Start the reserved suspect once nothing else runs; give it back, or let go of it,
        as the diagram says."""
        worker, run = self.worker, self.run
        if run is None:
            return
        if self.started:
            if run.settled:   # timed out or lost while its body runs on: nothing more to learn
                self.run, self.due = None, True
            return
        if run.settled:       # lost before it ever started
            worker.busy[run.job.queue] -= 1
            self.run = None
        elif not worker.accepting or now_ms - run.started_ms >= worker.settings.lease_ms:
            why = ("the worker stopped before running it alone" if not worker.accepting else
                   "its worker's other runs did not end within a lease window")
            if worker.accepting:
                self._busy_hold_off = now_ms + _HOLD_OFF_LEASES * worker.settings.lease_ms
            worker.busy[run.job.queue] -= 1
            self.run = None
            worker._finish(run, now_ms)
            worker._write_nack(run, worker._given_back(run, why), now_ms)
        elif worker.in_flight() == 1:
            run.started_ms = now_ms     # its lease was renewed all along; only the body starts now
            timeout = run.handle.timeout_ms
            run.deadline_ms = None if timeout is None else now_ms + timeout
            self.started = True
            worker._executor.submit_many([run])

    def body_ended(self, run: "Run") -> None:
        """A body returned: if it was the suspect's, look for the next one at once."""
        if run is self.run:
            self.run, self.due = None, True
