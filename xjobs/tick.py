"""``xjobsd tick``: all of the app's background work in ONE bounded pass, for deployments with
no long-lived daemon (a systemd timer, a Kubernetes CronJob, a serverless cron).

One process, one connection pool, one deadline::

    upkeep      lapsed leases back, due sleepers and timed-out waits woken, the aging queues'
                waiting jobs a batch each of their priority gained (``job(aging=)``)
    leader      the scheduler's leader lease, taken for this part and handed back after it
                (a daemon's leader or another tick holding it: this tick does none of it):
                  cron     due occurrences dispatched, fenced on the lease, so two
                           overlapping ticks never double-fire; then the due scans, isolated
                  prune    the leader's retention (jobs, outbox, events, run counts) in the
                           upkeep's batches, again while a batch comes back full, within a
                           share of the deadline and never past half the lease
    queues      the outbox relay and a worker run side by side until nothing is due and
                nothing was published or claimed for the quiet window (``wait_for_work_s``
                widens it: a producer's commit wakes the lingering pass within milliseconds),
                or the deadline: every job isolated (one that raises is reported beside its
                siblings)
    deadline    running jobs are interrupted like a drain (their attempt not charged); one that
                ignores its signal is handed back one lease window later, also without an attempt
    summary     per job name, what its runs came to, every failure with its verdict, what the
                relay published and what the prune deleted

The same declarations run unchanged under ``xjobsd run``; a body reads the tick's budget from
``ctx.remaining()`` and checkpoints with steps to go on at the next tick.
"""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Sequence, cast

from .aging import queue_agings
from .clock import monotonic_ms
from .config import Settings
from .context import Ctx
from .drivers.base import JobDriver
from .errors import InvalidOption
from .options import finite_count, finite_option
from .registry import Registry
from .retry import RetryVerdict
from .workers.drive import drive
from .workers.failures import describe
from .workers.host import Lent, Lifecycle, wind_down
from .workers.outbox_relay import OutboxRelay
from .workers.queue_worker import QueueWorker
from .workers.scanning import ScanRun, run_due_scans
from .workers.scheduler import ELECTION, Scheduler
from .workers.upkeep import Pruned, Upkeep

_IDLE_CHECK_MS = 100.0     # how often the pass looks whether it ran or claimed anything since
_CLOSE_GRACE_MS = 500.0    # after the deadline: settle what the interrupt stopped
_TICK_POLL_MS = 100.0      # a retry due now is claimed within this, not at the daemon's poll
_QUIET_CHECKS = 3          # checks in a row with nothing claimed and nothing running: done
# a backlog of old rows must not eat the pass: the prune stops after this share of the deadline
# (and at half the leader lease, so it never goes on once another leader may have taken over);
# what is left goes at the next tick, as the daemon's leader takes it a batch at a time
_PRUNE_SHARE = 0.2


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
    outbox: dict[str, int] = field(default_factory=dict)            # what the relay published
    # rescued and woken; pruned per table, or None when another leader's retention it is
    upkeep: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def as_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "deadline_s": self.deadline_s, "elapsed_s": round(self.elapsed_s, 3),
                "reached_deadline": self.reached_deadline, "cron": self.cron, "jobs": self.jobs,
                "failures": self.failures, "abandoned": self.abandoned, "outbox": self.outbox,
                "upkeep": self.upkeep, "failed": self.failed}


class _Failures:
    """The pass's own record of every failed attempt that settled, with its verdict: called by
    the worker's settler on its loop thread, never through the app's best-effort hooks."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def __call__(self, ctx: Ctx, error: BaseException, verdict: RetryVerdict) -> None:
        self.items.append({"job_id": ctx.job_id, "name": ctx.name, "queue": ctx.queue,
                           "attempt": ctx.attempt, "error": describe(error),
                           "verdict": verdict.reason, "dead": verdict.dead})

    def add(self, name: str, error: str, verdict: str) -> None:
        """A failure that is no job's attempt (a scan, the relay): listed beside the jobs'."""
        self.items.append({"job_id": None, "name": name, "queue": None, "attempt": None,
                           "error": error, "verdict": verdict, "dead": False})


def run_tick(*, driver: JobDriver, registry: Registry, settings: Settings, deadline_s: float = 25.0,
             queues: Sequence[str] | None = None, concurrency: int = 16, identity: str | None = None,
             clock: Callable[[], float] = monotonic_ms, wait_for_work_s: float = 0.0) -> TickSummary:
    """One bounded pass (see the module doc); answers its summary. ``wait_for_work_s``: how
    long the pass stays for new work once nothing is left (never past the deadline)."""
    deadline_s = finite_option(deadline_s, "deadline", exclusive_minimum=True, maximum=3600.0)
    wait_for_work_s = finite_option(wait_for_work_s, "wait_for_work", maximum=3600.0)
    concurrency = finite_count(concurrency, "concurrency", minimum=1, maximum=10_000)
    names = list(queues) if queues else registry.queues()
    if not names:
        raise InvalidOption("queue", "the app declares no jobs: nothing to run")
    # each role closes its driver as it closes: lent, the caller's pools stay open across the
    # pass's three roles (and the next tick in this process); the caller closes them
    driver = cast(JobDriver, Lent(driver))
    identity = identity or f"tick-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    began = clock()
    deadline = began + deadline_s * 1000.0
    summary = TickSummary(identity, deadline_s)
    # aged before the pass claims: the order its worker takes the backlog in is the aged one
    upkeep = Upkeep(driver=driver, settings=settings, who=f"tick {identity}", count=lambda name, n: None,
                    agings=queue_agings(registry.jobs()))
    summary.upkeep = {"rescued": driver.job_rescue(), "woken": driver.job_wake(), "pruned": None,
                      "aged": upkeep.age_each()}
    failures = _Failures()
    prune_until = began + min(deadline_s * 1000.0 * _PRUNE_SHARE, settings.leader_lease_ms / 2.0)
    summary.cron, scans, pruned = _leader_round(driver, registry, settings, identity, upkeep,
                                                time.time() + deadline_s, lambda: clock() >= prune_until)
    summary.upkeep["pruned"] = None if pruned is None else asdict(pruned)
    for run in scans:
        if not run.ok:
            failures.add(f"scan:{run.name}", run.error or "", "a scan runs again at its next interval")
    relay = OutboxRelay(driver=driver, identity=identity, settings=settings, poll=_TICK_POLL_MS, clock=clock)
    worker = QueueWorker(driver=driver, registry=registry, queues={q: concurrency for q in names},
                         settings=replace(settings, poll_ms=_TICK_POLL_MS), identity=identity,
                         clock=clock, maintain=False, failures=failures)
    lifecycle = Lifecycle(worker)
    relay.initialize()
    try:
        try:
            lifecycle.initialize()
        except BaseException:   # a start hook refused (X_WORKER_START_FAILED): let go of the worker
            lifecycle.close(clock(), at_once=True)
            raise
        worker.bound_runs(deadline)
        try:
            summary.reached_deadline = not _work(worker, relay, failures, deadline, clock, wait_for_work_s)
        finally:
            # what the deadline interrupted has the grace to settle as interrupted
            wind_down(lifecycle, clock, max(deadline, clock()) + _CLOSE_GRACE_MS,
                      "the tick's deadline" if summary.reached_deadline else "the tick is done", interrupt=True)
    finally:
        relay.stop_accepting("the tick is done")
        relay.close()       # its listener; the lent driver stays open
    summary.outbox = {key: relay.totals[key] for key in ("published", "batches", "claim_failed", "publish_failed")}
    if relay.totals["claim_failed"] or relay.totals["publish_failed"]:
        failures.add("outbox", f"{relay.totals['claim_failed']} claim(s) and {relay.totals['publish_failed']} "
                     "publish(es) failed", "the rows stay staged for the next pass")
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


def _leader_round(driver: JobDriver, registry: Registry, settings: Settings, identity: str, upkeep: Upkeep,
                  deadline_at: float, prune_over: Callable[[], bool],
                  ) -> tuple[dict[str, Any], list[ScanRun], Pruned | None]:
    """What only the leader does, under the scheduler's own lease: so a tick beside a daemon
    (whose scheduler leads) or beside another tick does none of it twice. One scheduler
    round, the due scans, then the prune; the lease is handed back after it."""
    scheduler = Scheduler(driver=driver, registry=registry, settings=settings, identity=identity,
                          maintain=False)
    scheduler.initialize()
    scans: list[ScanRun] = []
    pruned: Pruned | None = None
    try:
        report = scheduler.tick()
        if report.leader:
            if registry.scans():
                scans = run_due_scans(driver, registry, election=ELECTION, holder=scheduler.holder,
                                      deadline=deadline_at, stopping=lambda: time.time() >= deadline_at)
            pruned = _prune(upkeep, prune_over)
    finally:
        scheduler.stop_accepting("the tick's round is over")
        scheduler.close(None)
    return ({"leader": report.leader, "dispatched": report.dispatched, "deduped": report.deduped,
             "dropped": report.dropped, "tasks": dict(report.tasks),
             "scans": sorted(run.name for run in scans)}, scans, pruned)


def _prune(upkeep: Upkeep, over: Callable[[], bool]) -> Pruned:
    """The leader's prune, a batch per table at a time, again while one comes back full."""
    total = Pruned()
    while True:
        batch = upkeep.prune()
        total.add(batch)
        if not batch.full or over():
            return total


def _work(worker: QueueWorker, relay: OutboxRelay, failures: _Failures, deadline: float,
          clock: Callable[[], float], wait_for_work_s: float) -> bool:
    """Run the worker and the relay until nothing is due (True) or the deadline (False).

    Nothing is due once nothing ran, was claimed or was published through ``_QUIET_CHECKS``
    checks in a row (or ``wait_for_work_s``, when longer), spaced wider than the claim poll:
    a retry due now, a woken sleeper, a dispatched occurrence or a published row is claimed
    before the pass calls it a day. The relay takes its turn after each of the worker's
    passes, on the same thread; its notifications end the loop's waits too."""
    if clock() >= deadline:     # the leader's part spent it all: claim nothing to interrupt at once
        return False
    checks = max(_QUIET_CHECKS, math.ceil(wait_for_work_s * 1000.0 / _IDLE_CHECK_MS))
    seen: dict[str, Any] = {"next_check": 0.0, "quiet": 0, "activity": None, "relay": True}

    def relay_turn() -> None:
        if not seen["relay"]:
            return
        try:
            relay.run_once(clock())
        except Exception as exc:    # its listener went away: the summary says so, the rows wait
            seen["relay"] = False
            failures.add("outbox", describe(exc), "the rows stay staged for the next pass")

    def quiet() -> bool:
        relay_turn()
        now = clock()
        if now < seen["next_check"]:
            return False
        seen["next_check"] = now + _IDLE_CHECK_MS
        activity = (worker.stats_.claimed, relay.totals["published"])
        seen["quiet"] = seen["quiet"] + 1 if worker.in_flight() == 0 and activity == seen["activity"] else 0
        seen["activity"] = activity
        return bool(seen["quiet"] >= checks)
    return drive(worker, until=quiet, deadline=deadline, clock=clock, most_wait_ms=_IDLE_CHECK_MS,
                 fds=relay.wakeup_fds())


__all__ = ["TickSummary", "run_tick"]
