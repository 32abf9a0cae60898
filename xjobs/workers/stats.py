"""A worker's stats: the counters its collaborators bump as runs settle, and the record of
them published in every heartbeat.

The worker keeps one live ``WorkerStats`` (``QueueWorker.stats_``). Its collaborators count
into it from the loop and the executor's threads (``bump``, ``outcome``/``outcomes``,
``steps``, each under its lock); ``snapshot`` copies it, with the levels the worker adds
(what is in flight, the runs worth naming, its limits), into the record the heartbeat
carries (``telemetry.RoleStats``). Counters only grow within one process; the supervisor adds
a restarted child's fresh counters to what its predecessors reported, so the published
totals never go backwards.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from .telemetry import OUTCOMES, STEP_COUNTS, Histogram, JobCounts, RoleStats, outcomes_from_wire


@dataclass
class WorkerStats(RoleStats):
    claimed: int = 0
    # the outcomes (OUTCOMES), each the sum of its column in ``jobs``
    completed: int = 0
    retried: int = 0
    dead: int = 0
    interrupted: int = 0
    cancelled: int = 0
    suspended: int = 0
    shed: int = 0
    snoozed: int = 0
    lease_lost: int = 0
    settle_failed: int = 0
    timed_out: int = 0
    # runs still going at the close deadline, handed back one lease later: a counter, not an
    # outcome, since such a run has not settled and is delivered again
    abandoned: int = 0
    sweeps: int = 0
    claim_failed: int = 0
    # what runs did with ctx.step, one counter per STEP_COUNTS kind
    steps_run: int = 0
    steps_replayed: int = 0
    steps_woke: int = 0
    steps_delivered: int = 0
    steps_timed_out: int = 0
    jobs: dict[str, dict[str, int]] = field(default_factory=dict)   # job -> outcome -> runs
    durations: dict[str, Histogram] = field(default_factory=dict)   # job -> its run durations
    # the levels a snapshot adds: the runs ``xjobsd status`` names, the limiter's figures
    running: list[dict[str, Any]] = field(default_factory=list)
    limits: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # -- counting (the live instance) -------------------------------------------------------------

    def bump(self, key: str, n: int = 1) -> None:
        if key not in _COUNTERS:
            raise KeyError(key)
        with self._lock:
            setattr(self, key, getattr(self, key) + n)

    def steps(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            for kind, n in counts.items():
                if n:
                    name = f"steps_{kind}"
                    setattr(self, name, getattr(self, name) + n)

    def outcome(self, job: str, outcome: str, seconds: float | None) -> None:
        self.outcomes([(job, outcome, seconds)])

    def outcomes(self, entries: list[tuple[str, str, float | None]]) -> None:
        """Record a pass's worth of settled runs under one lock."""
        with self._lock:
            for job, outcome, seconds in entries:
                self._record(job, outcome, seconds)

    def _record(self, job: str, outcome: str, seconds: float | None) -> None:
        if outcome not in OUTCOMES:
            raise KeyError(outcome)
        setattr(self, outcome, getattr(self, outcome) + 1)
        per_job = self.jobs.get(job)
        if per_job is None:
            per_job = self.jobs[job] = {}
        per_job[outcome] = per_job.get(outcome, 0) + 1
        if seconds is not None:
            hist = self.durations.get(job)
            if hist is None:
                hist = self.durations[job] = Histogram()
            hist.observe(seconds)

    def job_outcomes(self) -> dict[str, dict[str, int]]:
        """Per job name, how many runs ended in each outcome so far (a copy)."""
        with self._lock:
            return {job: dict(counts) for job, counts in self.jobs.items()}

    def snapshot(self, in_flight: int, running: list[dict[str, Any]] | None = None,
                 limits: dict[str, Any] | None = None) -> "WorkerStats":
        """The record for a heartbeat: a copy of the counters, with the worker's levels."""
        with self._lock:
            return dataclasses.replace(
                self, in_flight=in_flight, running=list(running or ()), limits=limits,
                jobs={job: dict(counts) for job, counts in self.jobs.items()},
                durations={job: hist.copy() for job, hist in self.durations.items()})

    # -- the record ------------------------------------------------------------------------------

    def job_counts(self) -> JobCounts:
        return JobCounts(outcomes=self.jobs, durations=self.durations,
                         steps={kind: getattr(self, f"steps_{kind}") for kind in STEP_COUNTS},
                         claimed=self.claimed, claim_failed=self.claim_failed, lease_lost=self.lease_lost)

    def describe(self) -> str:
        return (f"{self.claimed} claimed, {self.completed} completed, {self.retried} retried, "
                f"{self.dead} dead, {self.in_flight} in flight")

    def status(self) -> dict[str, Any]:
        return {**super().status(), "running": self.running, "limits": self.limits}

    def to_wire(self) -> dict[str, Any]:
        return {**super().to_wire(), "durations": {job: hist.to_wire() for job, hist in self.durations.items()}}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "WorkerStats":
        record = super().from_wire(data)
        record.jobs = outcomes_from_wire(data.get("jobs"))
        durations = data.get("durations")
        if isinstance(durations, dict):
            record.durations = {job: hist for job, value in durations.items()
                                if (hist := Histogram.from_wire(value)) is not None}
        running = data.get("running")
        if isinstance(running, list):
            record.running = [run for run in running if isinstance(run, dict)]
        limits = data.get("limits")
        record.limits = limits if isinstance(limits, dict) else None
        return record


_COUNTERS = frozenset(WorkerStats().counters())   # what ``bump`` may count
