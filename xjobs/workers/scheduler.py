"""The scheduler: a leader-elected cron dispatcher, and the fleet's maintenance.

One ``scheduler`` child runs per daemon; the daemons of a fleet elect ONE leader through a
lease ROW (``scheduler_leader``) with an expiry on the database's clock. ``holder`` is the
daemon's identity, not the child's: a scheduler child that crashed and was restarted by its
supervisor takes its lease straight back instead of leaving the fleet leaderless for a lease.

::

    accepting ──round: elect (or renew) the lease──> leader? ──no──> follower (ask again next round)
        │                                               │yes
        │                 for each task, re-reading the drain state first:
        │                   one transaction: fence on the lease row, enqueue the occurrences
        │                   due since the task's watermark, advance the watermark
        │                   (compare-and-set); fenced out -> no longer leader, stop the round
        │               then, on their own timers: rescue lapsed leases and wake due
        │               suspensions, prune retention (jobs, outbox)
        └─ stop_accepting ──> draining (no new round) ──close──> rounds joined, lease handed
                                                                 back (unless a round was
                                                                 abandoned at the deadline)

Exactly once per occurrence across failover comes from the transaction, not from the job's
key: the watermark advances in the same commit as the enqueue of what it covers, and only
while this daemon still holds the lease, so a paused ex-leader that wakes up after another
daemon took over commits nothing. The occurrence-scoped key only folds two dispatches of one
occurrence while its job is live.

One round at a time: a ``tick()`` from another thread while a round is in flight waits for
that round and answers its report (it joins); the next round is armed when the last ends.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..aging import queue_agings
from ..clock import monotonic_ms
from ..config import Settings
from ..cron import DEFAULT_RESOLVER, CronResolver
from ..logs import event
from ..drivers.base import Dispatch, JobDriver
from ..registry import Registry
from ..context import DRAINED
from ..scans import ScanCtx
from ..tasks import TaskHandle
from .scanning import run_due_scans
from .upkeep import Upkeep
from .role import RoleBase, RoleContext, RoleGauge, RolePolicy
from .telemetry import JobCounts, RoleStats, outcomes_from_wire

log = logging.getLogger("xjobs.scheduler")

ELECTION = "scheduler"
_ROUND_AT_LEAST_MS = 50.0     # never spin: a round is at least this far from the last one


@dataclass
class RoundReport:
    """What one round did. ``dispatched`` counts jobs enqueued, ``deduped`` occurrences whose
    job already existed (another dispatcher got there first)."""

    leader: bool = False
    dispatched: int = 0
    deduped: int = 0
    dropped: int = 0
    tasks: dict[str, int] = field(default_factory=dict)


@dataclass
class SchedulerStats(RoleStats):
    """What a scheduler reports: its rounds and their dispatches, its upkeep, and the scans'
    outcomes (``jobs``, counted in ``xjobs_jobs_total`` like runs)."""

    LEVELS = frozenset({"in_flight", "leader", "tasks"})

    rounds: int = 0
    dispatched: int = 0
    deduped: int = 0
    dropped: int = 0
    rescued: int = 0
    pruned: int = 0
    elections_won: int = 0
    sweeps: int = 0
    woken: int = 0
    aged: int = 0        # waiting jobs whose priority its upkeep improved (job(aging=))
    leader: int = 0      # 1 while it leads the fleet (xjobs_scheduler_leader)
    tasks: int = 0       # the cron tasks it dispatches
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)   # scan -> outcome -> runs

    def job_counts(self) -> JobCounts:
        return JobCounts(outcomes=self.jobs)

    def describe(self) -> str:
        return (f"{'LEADER' if self.leader else 'follower'}; {self.tasks} task(s), {self.dispatched} "
                f"dispatched, {self.rounds} round(s), {self.rescued} rescued")

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "SchedulerStats":
        record = super().from_wire(data)
        record.jobs = outcomes_from_wire(data.get("jobs"))
        return record


class Scheduler(RoleBase):
    role = "scheduler"
    policy = RolePolicy(gauges=(RoleGauge("xjobs_scheduler_leader", "leader",
                                          "1 while this daemon's scheduler leads the fleet."),),
                        stats=SchedulerStats)

    def __init__(self, *, driver: JobDriver, registry: Registry, settings: Settings | None = None,
                 identity: str, holder: str | None = None, resolver: CronResolver = DEFAULT_RESOLVER,
                 maintain: bool = True, clock: Callable[[], float] = monotonic_ms) -> None:
        super().__init__(identity)
        self.driver = driver
        self.registry = registry
        self.settings = settings or Settings()
        self.identity = identity
        self.holder = holder or identity
        self.resolver = resolver
        self.maintain = maintain
        self.clock = clock
        self.state = "new"
        self.accepting = False
        self.is_leader = False
        self.tasks: list[TaskHandle] = []
        self.totals = {"rounds": 0, "dispatched": 0, "deduped": 0, "dropped": 0, "rescued": 0,
                       "pruned": 0, "elections_won": 0, "sweeps": 0, "woken": 0, "aged": 0}
        self._round_lock = threading.Lock()
        self._round_done = threading.Condition(self._round_lock)
        self._in_round = False
        self.joined = threading.Event()   # test hook: set once a tick() waits on the round in flight
        self._last_outcome: RoundReport | BaseException = RoundReport()
        self._next_round = 0.0
        # the fleet's upkeep, on the leader only: its cost does not grow with the worker count
        self.upkeep = Upkeep(driver=driver, settings=self.settings, who=f"scheduler {identity}",
                             count=self._count, agings=queue_agings(registry.jobs()))
        self.abandoned = False
        self._scans: threading.Thread | None = None      # due scans, off the loop thread
        self._scan_counts: dict[str, dict[str, int]] = {}  # scan -> outcome -> runs (xjobs_jobs_total)
        self._scan_lock = threading.Lock()
        self._scan_ctx: ScanCtx | None = None           # the scan running now (a drain tells it)

    @classmethod
    def build(cls, context: RoleContext) -> "Scheduler":
        return cls(driver=context.connect(pool_size=1), registry=context.registry,
                   settings=context.settings, identity=context.identity,
                   holder=context.daemon or context.identity)

    # -- lifecycle ---------------------------------------------------------------------------------

    def initialize(self) -> None:
        if self.state != "new":
            return
        self.tasks = self.registry.tasks()
        self.accepting = True
        self.state = "accepting"

    def wakeup_fds(self) -> Sequence[int]:
        return ()

    def in_flight(self) -> int:
        return 1 if self._in_round else 0

    def stats(self) -> SchedulerStats:
        with self._scan_lock:
            jobs = {name: dict(outcomes) for name, outcomes in self._scan_counts.items()}
        return SchedulerStats(**self.totals, leader=1 if self.is_leader else 0, tasks=len(self.tasks),
                              in_flight=self.in_flight(), jobs=jobs)

    def _start_scans(self) -> None:
        """Run the due scans on a thread of their own (one batch at a time): a long scan must
        not keep this loop from renewing the leader lease."""
        if not self.registry.scans() or (self._scans is not None and self._scans.is_alive()):
            return
        self._scans = threading.Thread(target=self._run_scans, name=f"xjobs-scans-{self.identity}",
                                       daemon=True)
        self._scans.start()

    def _scan_started(self, ctx: ScanCtx | None) -> None:
        self._scan_ctx = ctx
        if ctx is not None and not self.accepting:
            ctx.signal.abort(DRAINED, f"scheduler {self.identity} is draining")

    def _run_scans(self) -> None:
        try:
            runs = run_due_scans(self.driver, self.registry, election=ELECTION, holder=self.holder,
                                 stopping=lambda: not self.accepting, started=self._scan_started)
        except Exception as exc:
            event(log, logging.WARNING, "scan.round.failed", "scheduler %s: running due scans failed: %s",
                  self.identity, exc, error=str(exc), scheduler=self.identity)
            return
        with self._scan_lock:
            for run in runs:
                outcomes = self._scan_counts.setdefault(run.name, {})
                outcomes[run.outcome] = outcomes.get(run.outcome, 0) + 1

    def stop_accepting(self, reason: str = "drain", interrupt: bool = True,
                       deadline_ms: float | None = None) -> None:
        """Accept phase: no round starts from now on; a round in flight stops before its
        next task."""
        if self.accepting:
            self.accepting = False
            self.state = "draining"
        scan = self._scan_ctx
        if scan is not None:    # a scan running now is told, as a drain tells a job
            scan.signal.abort(DRAINED, f"scheduler {self.identity} is draining ({reason})")

    def close(self, deadline_ms: float | None = None) -> None:
        """Close phase: wait out a round in flight (up to the deadline), then hand the lease
        back. A round still running at the deadline is abandoned: its lease is left to expire,
        because handing it back while that round may still commit would let a second leader
        dispatch beside it."""
        if self.state in ("stopped", "closing"):
            return
        self.accepting = False
        self.state = "closing"
        try:
            with self._round_lock:
                while self._in_round:
                    left = None if deadline_ms is None else (deadline_ms - self.clock()) / 1000.0
                    if left is not None and left <= 0:
                        break
                    self._round_done.wait(left)
                self.abandoned = self._in_round
            if self.abandoned:
                event(log, logging.WARNING, "scheduler.drain.abandoned", "scheduler %s: drain abandoned a "
                      "dispatch round still running at the deadline; its leader lease is left to expire",
                      self.identity, scheduler=self.identity, holder=self.holder)
            elif self.is_leader:
                try:
                    self.driver.leader_resign(ELECTION, self.holder)
                except Exception as exc:
                    event(log, logging.WARNING, "scheduler.resign.failed", "scheduler %s: handing the "
                          "leader lease back failed (it expires on its own): %s", self.identity, exc,
                          error=str(exc), scheduler=self.identity, holder=self.holder)
        finally:
            self.is_leader = False    # a lease not handed back is never assumed held
            self.state = "stopped"
            scans = self._scans       # told to stop by the drain: given until the deadline to
            if scans is not None and scans.is_alive():   # end, before its driver is closed
                left = None if deadline_ms is None else max(0.0, (deadline_ms - self.clock()) / 1000.0)
                scans.join(left)
            self.driver.close()

    # -- the loop ----------------------------------------------------------------------------------

    def run_once(self, now_ms: float) -> float:
        if self.accepting and now_ms >= self._next_round:
            wait = self._round_wait(self.tick())
            self._next_round = now_ms + max(_ROUND_AT_LEAST_MS, wait)
            if self.is_leader and self.accepting:
                self._start_scans()
        if self.is_leader and self.maintain and self.accepting:
            self.upkeep.run(now_ms)
        due = [self._next_round]
        if self.is_leader and self.maintain:
            due.append(self.upkeep.next_due())
        return max(0.0, min(due) - now_ms)

    def tick(self) -> RoundReport:
        """One dispatch round; joins the round in flight instead of starting a second one."""
        with self._round_lock:
            if self._in_round:
                self.joined.set()      # under the lock: the round cannot end before this waits
                while self._in_round:
                    self._round_done.wait()
                if isinstance(self._last_outcome, BaseException):
                    raise self._last_outcome
                return self._last_outcome
            self._in_round = True
        outcome: RoundReport | BaseException = RoundReport()
        try:
            outcome = self._round()
            return outcome
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            # published under the lock, before the joiners wake: each gets THIS round's answer
            with self._round_lock:
                self._last_outcome = outcome
                self._in_round = False
                self._round_done.notify_all()

    def _round(self) -> RoundReport:
        # counted once the round is over: a round counted while its election is still in flight
        # would report the leadership of the round before it
        try:
            return self._elect_and_dispatch()
        finally:
            self.totals["rounds"] += 1

    def _elect_and_dispatch(self) -> RoundReport:
        report = RoundReport()
        try:
            leader = self.driver.leader_elect(ELECTION, self.holder, self._lease_ms())
        except Exception as exc:
            event(log, logging.WARNING, "scheduler.election.failed", "scheduler %s: the leader election "
                  "failed: %s", self.identity, exc, error=str(exc), scheduler=self.identity)
            if self.is_leader:
                self._leadership_lost("the election could not be held")
            self.is_leader = False
            return report
        if leader and not self.is_leader:
            self.totals["elections_won"] += 1
            event(log, logging.INFO, "scheduler.leader.gained", "scheduler %s: leading (holder %s)",
                  self.identity, self.holder, scheduler=self.identity, holder=self.holder)
        elif self.is_leader and not leader:
            self._leadership_lost("another daemon holds the lease")
        self.is_leader = report.leader = leader
        if not leader or not self.tasks:
            return report
        try:
            now = self.driver.clock_now_ms()
            watermarks = {w.task: w.watermark_ms for w in self.driver.schedule_state()}
        except Exception as exc:
            event(log, logging.WARNING, "scheduler.schedule.failed", "scheduler %s: reading the schedule "
                  "failed: %s", self.identity, exc, error=str(exc), scheduler=self.identity)
            return report
        for task in self.tasks:
            if not self.accepting:      # the drain is re-read before every task
                break
            if not self._dispatch(task, watermarks.get(task.name), now, report):
                break
        self.totals["dispatched"] += report.dispatched
        self.totals["deduped"] += report.deduped
        self.totals["dropped"] += report.dropped
        return report

    def _dispatch(self, task: TaskHandle, watermark: int | None, now: float, report: RoundReport) -> bool:
        """Dispatch one task's due occurrences; answers False when the round must stop."""
        occurrences: list[float]
        if watermark is None:    # a new task starts from now: nothing it never knew is "missed"
            occurrences, dropped = [], 0
        else:
            occurrences, dropped = task.plan(watermark, now, self.resolver)
            if not occurrences:
                return True
        try:
            jobs = task.jobs_for(occurrences, max_payload_bytes=self.settings.max_payload_bytes,
                                 by=self.identity)
            result = self.driver.schedule_dispatch(Dispatch(
                election=ELECTION, holder=self.holder, task=task.name, expected_ms=watermark,
                watermark_ms=int(now), jobs=tuple(jobs)))
        except Exception as exc:
            event(log, logging.ERROR, "scheduler.dispatch.failed", "scheduler %s: dispatching %s failed: %s",
                  self.identity, task.name, exc, task=task.name, error=str(exc), scheduler=self.identity)
            return True
        if result is None:
            self._leadership_lost(f"fenced out while dispatching {task.name}")
            self.is_leader = report.leader = False
            return False
        new = sum(1 for r in result if not r.deduped)
        report.dispatched += new
        report.deduped += len(result) - new
        report.dropped += dropped
        report.tasks[task.name] = new
        if dropped:
            event(log, logging.WARNING, "scheduler.occurrences.skipped", "scheduler %s: task %s missed %d "
                  "more occurrence(s) than max_catch_up=%d; they are skipped", self.identity, task.name,
                  dropped, task.max_catch_up, task=task.name, skipped=dropped,
                  max_catch_up=task.max_catch_up, scheduler=self.identity)
        return True

    def _round_wait(self, report: RoundReport) -> float:
        """How long until the next round: the next occurrence of any task, and at most a third
        of the lease (the leader renews it every round; a follower asks again)."""
        wait = self._lease_ms() / 3.0
        if report.leader and self.tasks:
            try:
                now = self.driver.clock_now_ms()
                upcoming = min(self.resolver.after(t.cron, t.tz, now) for t in self.tasks)
                wait = min(wait, max(0.0, upcoming - now))
            except Exception as exc:
                log.warning("scheduler %s: computing the next round failed: %s", self.identity, exc)
        return wait

    def _leadership_lost(self, why: str) -> None:
        event(log, logging.WARNING, "scheduler.leader.lost", "scheduler %s: no longer the leader (%s)",
              self.identity, why, why=why, scheduler=self.identity, holder=self.holder)

    def _count(self, name: str, n: int) -> None:
        self.totals[name] += n

    def _lease_ms(self) -> float:
        return self.settings.leader_lease_ms
