"""A worker's counters, in the shape published over the supervisor pipe.

Counters only grow within one process; the supervisor adds a restarted child's fresh
counters to what its predecessors reported, so the published totals never go backwards.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any

OUTCOMES = ("completed", "retried", "dead", "interrupted", "cancelled", "suspended", "shed")
# what runs did with ctx.step, as worker counters "steps_<kind>" (xjobs_steps_total{kind})
STEP_COUNTS = ("run", "replayed", "woke", "delivered", "timed_out")
# seconds; the last bucket (+Inf) is implied by "count"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 900.0)


class WorkerStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # "abandoned": runs still going at the close deadline, handed back one lease later. A
        # counter, not an outcome: such a run has not settled, it is delivered again.
        self.totals = {name: 0 for name in ("claimed", *OUTCOMES, "lease_lost", "settle_failed",
                                            "timed_out", "abandoned", "sweeps", "claim_failed",
                                            *(f"steps_{kind}" for kind in STEP_COUNTS))}
        self.jobs: dict[str, dict[str, int]] = {}
        self.durations: dict[str, list[float]] = {}   # name -> [bucket counts..., sum, count]

    def bump(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.totals[key] += n

    def steps(self, counts: dict[str, int]) -> None:
        with self._lock:
            for kind, n in counts.items():
                if n:
                    self.totals[f"steps_{kind}"] += n

    def outcome(self, job: str, outcome: str, seconds: float | None) -> None:
        self.outcomes([(job, outcome, seconds)])

    def outcomes(self, entries: list[tuple[str, str, float | None]]) -> None:
        """Record a pass's worth of settled runs under one lock."""
        with self._lock:
            for job, outcome, seconds in entries:
                self._record(job, outcome, seconds)

    def _record(self, job: str, outcome: str, seconds: float | None) -> None:
        self.totals[outcome] += 1
        per_job = self.jobs.get(job)
        if per_job is None:
            per_job = self.jobs[job] = {}
        per_job[outcome] = per_job.get(outcome, 0) + 1
        if seconds is not None:
            hist = self.durations.get(job)
            if hist is None:
                hist = self.durations[job] = [0] * len(DURATION_BUCKETS) + [0.0, 0]
            index = bisect_left(DURATION_BUCKETS, seconds)
            if index < len(DURATION_BUCKETS):
                hist[index] += 1
            hist[-2] += seconds
            hist[-1] += 1

    def job_outcomes(self) -> dict[str, dict[str, int]]:
        """Per job name, how many runs ended in each outcome so far (a copy)."""
        with self._lock:
            return {job: dict(counts) for job, counts in self.jobs.items()}

    def snapshot(self, in_flight: int) -> dict[str, Any]:
        with self._lock:
            durations = {}
            for job, hist in self.durations.items():
                cumulative: list[float] = []
                running: float = 0
                for count in hist[:len(DURATION_BUCKETS)]:
                    running += count
                    cumulative.append(running)
                durations[job] = {"buckets": cumulative, "sum": hist[-2], "count": hist[-1]}
            return {"in_flight": in_flight, **self.totals,
                    "jobs": {job: dict(c) for job, c in self.jobs.items()},
                    "durations": durations}
