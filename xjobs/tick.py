"""``xjobsd tick``: all of the app's background work in ONE bounded pass, for deployments with
no long-lived daemon (a systemd timer, a Kubernetes CronJob, a serverless cron).

One process, one connection pool, one deadline::

    upkeep      lapsed leases back, due sleepers and timed-out waits woken
    cron        one scheduler round: due occurrences dispatched under the leader lease (taken
                for the pass, handed back after it), so two overlapping ticks never double-fire;
                then the due scans (``xjobs.scan``), each isolated
    queues      a worker runs the app's queues until nothing it can run is due, or the
                deadline: every job isolated (one that raises is reported beside its siblings)
    deadline    running jobs are interrupted like a drain (their attempt not charged); one that
                ignores its signal is handed back one lease window later, also without an attempt
    summary     per job name, what its runs came to, and every failure with its verdict

The same declarations run unchanged under ``xjobsd run``; a body reads the tick's budget from
``ctx.remaining()`` and checkpoints with steps to go on at the next tick.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from .clock import monotonic_ms
from .config import Settings
from .context import Ctx
from .drivers.base import JobDriver
from .errors import InvalidOption
from .options import finite_count
from .registry import Registry
from .retry import RetryVerdict
from .workers.drive import drive
from .workers.failures import describe
from .workers.host import Lifecycle, wind_down
from .workers.queue_worker import QueueWorker
from .workers.scanning import ScanRun, run_due_scans
from .workers.scheduler import ELECTION, Scheduler

_IDLE_CHECK_MS = 100.0     # how often the pass looks whether it ran or claimed anything since
_CLOSE_GRACE_MS = 500.0    # after the deadline: settle what the interrupt stopped
_TICK_POLL_MS = 100.0      # a retry due now is claimed within this, not at the daemon's poll
_QUIET_CHECKS = 3          # checks in a row with nothing claimed and nothing running: done


@dataclass
class TickSummary:
    identity: str
    deadline_s: float
    elapsed_s: float = 0.0
    reached_deadline: bool = False
    cron: dict[str, Any] = field(default_factory=dict)
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)   # name -> outcome -> runs
    failures: list[dict[str, Any]] = field(default_factory=list)
    abandoned: int = 0         # still running at the close: handed back, no attempt spent

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def as_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "deadline_s": self.deadline_s, "elapsed_s": round(self.elapsed_s, 3),
                "reached_deadline": self.reached_deadline, "cron": self.cron, "jobs": self.jobs,
                "failures": self.failures, "abandoned": self.abandoned, "failed": self.failed}


class _Failures:
    """The pass's own record of every failed attempt that settled, with its verdict: called by
    the worker's settler on its loop thread, never through the app's best-effort hooks."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def __call__(self, ctx: Ctx, error: BaseException, verdict: RetryVerdict) -> None:
        self.items.append({"job_id": ctx.job_id, "name": ctx.name, "queue": ctx.queue,
                           "attempt": ctx.attempt, "error": describe(error),
                           "verdict": verdict.reason, "dead": verdict.dead})


def run_tick(*, driver: JobDriver, registry: Registry, settings: Settings, deadline_s: float = 25.0,
             queues: Sequence[str] | None = None, concurrency: int = 16, identity: str | None = None,
             clock: Callable[[], float] = monotonic_ms) -> TickSummary:
    """One bounded pass (see the module doc); answers its summary."""
    concurrency = finite_count(concurrency, "concurrency", minimum=1, maximum=10_000)
    names = list(queues) if queues else registry.queues()
    if not names:
        raise InvalidOption("queue", "the app declares no jobs: nothing to run")
    identity = identity or f"tick-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    began = clock()
    deadline = began + deadline_s * 1000.0
    summary = TickSummary(identity, deadline_s)
    driver.job_rescue()
    driver.job_wake()
    failures = _Failures()
    summary.cron, scans = _cron_round(driver, registry, settings, identity, time.time() + deadline_s)
    for run in scans:
        if not run.ok:
            failures.items.append({"job_id": None, "name": f"scan:{run.name}", "queue": None,
                                   "attempt": None, "error": run.error,
                                   "verdict": "a scan runs again at its next interval", "dead": False})
    worker = QueueWorker(driver=driver, registry=registry, queues={q: concurrency for q in names},
                         settings=replace(settings, poll_ms=_TICK_POLL_MS), identity=identity,
                         clock=clock, maintain=False, failures=failures)
    lifecycle = Lifecycle(worker)
    lifecycle.initialize()
    worker.bound_runs(deadline)
    try:
        summary.reached_deadline = not _work(worker, deadline, clock)
    finally:
        # what the deadline interrupted has the grace to settle as interrupted
        wind_down(lifecycle, clock, max(deadline, clock()) + _CLOSE_GRACE_MS,
                  "the tick's deadline" if summary.reached_deadline else "the tick is done", interrupt=True)
    stats = worker.stats()
    ran = {name: dict(outcomes) for name, outcomes in stats.jobs.items()}
    for run in scans:    # a scan is no job: listed as scan:NAME, so a job of that name stays apart
        outcomes = ran.setdefault(f"scan:{run.name}", {})
        outcomes[run.outcome] = outcomes.get(run.outcome, 0) + 1
    summary.jobs = dict(sorted(ran.items()))
    summary.abandoned = stats.abandoned
    summary.failures = sorted(failures.items, key=lambda f: (f["name"], f["job_id"] or 0, f["attempt"] or 0))
    summary.elapsed_s = (clock() - began) / 1000.0
    return summary


def _cron_round(driver: JobDriver, registry: Registry, settings: Settings, identity: str,
                deadline_at: float) -> tuple[dict[str, Any], list[ScanRun]]:
    """One scheduler round with the lease taken for it, the due scans while it is held, then
    the lease handed back."""
    if not registry.tasks() and not registry.scans():
        return {"leader": None, "dispatched": 0}, []
    scheduler = Scheduler(driver=driver, registry=registry, settings=settings, identity=identity,
                          maintain=False)
    scheduler.initialize()
    scans: list[ScanRun] = []
    try:
        report = scheduler.tick()
        if report.leader:
            scans = run_due_scans(driver, registry, election=ELECTION, holder=scheduler.holder,
                                  deadline=deadline_at, stopping=lambda: time.time() >= deadline_at)
    finally:
        scheduler.stop_accepting("the tick's round is over")
        scheduler.close(None)
    return ({"leader": report.leader, "dispatched": report.dispatched, "deduped": report.deduped,
             "dropped": report.dropped, "tasks": dict(report.tasks),
             "scans": sorted(run.name for run in scans)}, scans)


def _work(worker: QueueWorker, deadline: float, clock: Callable[[], float]) -> bool:
    """Run the worker until nothing it can run is due (True) or the deadline (False).

    Nothing is due once the worker has run nothing and claimed nothing through
    ``_QUIET_CHECKS`` checks in a row, spaced wider than its claim poll: a retry due now, a
    woken sleeper or a dispatched occurrence is claimed before the pass calls it a day."""
    seen = {"next_check": 0.0, "quiet": 0, "claimed": -1}

    def quiet() -> bool:
        now = clock()
        if now < seen["next_check"]:
            return False
        seen["next_check"] = now + _IDLE_CHECK_MS
        claimed = worker.stats_.claimed
        seen["quiet"] = seen["quiet"] + 1 if worker.in_flight() == 0 and claimed == seen["claimed"] else 0
        seen["claimed"] = claimed
        return seen["quiet"] >= _QUIET_CHECKS
    return drive(worker, until=quiet, deadline=deadline, clock=clock, most_wait_ms=_IDLE_CHECK_MS)


__all__ = ["TickSummary", "run_tick"]
