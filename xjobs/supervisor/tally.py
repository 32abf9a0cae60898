"""Totals that survive child restarts: what ``/metrics`` counts never goes backwards.

A child's counters only grow within its own process and start again at zero in the next one.
The supervisor therefore keeps, per child identity, the last counters it received, and adds
only the positive difference of each new record to its own running totals. A restarted child
has a new identity, so its first record is all new work; a record that arrives twice adds
nothing. Levels are not accumulated: a record's ``LEVELS`` (``in_flight``, the scheduler's
leadership) and the stats of the gauges a role's policy declares (``RoleGauge``) are read from
the live children's latest records.

Each total is keyed by what it counts, one key class per kind (the supervisor adds its own
hand-backs and restarts beside what children report):

    Settled(queue, job, outcome)         xjobs_jobs_total
    Duration(queue, job, part)           xjobs_job_duration_seconds: cumulative bucket ``part``
                                         (an index into DURATION_BUCKETS), or "sum" / "count"
    Steps(queue, kind)                   xjobs_steps_total
    QueueCount(queue, name)              claim_failed, lease_lost, released: xjobs_*_total{queue}
    RoleCounter(role, queue, name)       any counter a role reports (a drain sums ``interrupted``)
    SlotCounter(role, queue, index, name)  the same per slot: ``xjobsd status``'s completed
    Restarts(role)                       xjobs_child_restarts_total
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterator, Literal, TypeVar, Union

from ..workers.telemetry import RoleStats


@dataclass(frozen=True, slots=True)
class Settled:
    queue: str
    job: str
    outcome: str


@dataclass(frozen=True, slots=True)
class Duration:
    queue: str
    job: str
    part: int | Literal["sum", "count"]


@dataclass(frozen=True, slots=True)
class Steps:
    queue: str
    kind: str


@dataclass(frozen=True, slots=True)
class QueueCount:
    queue: str
    name: Literal["claim_failed", "lease_lost", "released"]


@dataclass(frozen=True, slots=True)
class RoleCounter:
    role: str
    queue: str
    name: str


@dataclass(frozen=True, slots=True)
class SlotCounter:
    role: str
    queue: str
    index: int
    name: str


@dataclass(frozen=True, slots=True)
class Restarts:
    role: str


Key = Union[Settled, Duration, Steps, QueueCount, RoleCounter, SlotCounter, Restarts]
K = TypeVar("K", Settled, Duration, Steps, QueueCount, RoleCounter, SlotCounter, Restarts)


def flatten(role: str, queue: str | None, index: int, stats: RoleStats,
            gauges: Collection[str] = ()) -> dict[Key, float]:
    """The counters of one record, keyed as in the module docstring; ``gauges`` are the stats
    the role's policy declares as levels."""
    q = queue or ""
    flat: dict[Key, float] = {}
    counts = stats.job_counts()
    for job, outcomes in counts.outcomes.items():
        for outcome, n in outcomes.items():
            flat[Settled(q, job, outcome)] = n
    for job, hist in counts.durations.items():
        for i, runs in enumerate(hist.buckets):
            flat[Duration(q, job, i)] = runs
        flat[Duration(q, job, "sum")] = hist.sum
        flat[Duration(q, job, "count")] = hist.count
    for kind, n in counts.steps.items():
        flat[Steps(q, kind)] = n
    flat[QueueCount(q, "claim_failed")] = counts.claim_failed
    flat[QueueCount(q, "lease_lost")] = counts.lease_lost
    for name, value in stats.counters().items():
        if name not in gauges:
            flat[RoleCounter(role, q, name)] = value
            flat[SlotCounter(role, q, index, name)] = value
    return flat


class Tally:
    def __init__(self) -> None:
        self.totals: dict[Key, float] = {}
        self._last: dict[str, dict[Key, float]] = {}

    def observe(self, identity: str, role: str, queue: str | None, index: int, stats: RoleStats, *,
                gauges: Collection[str] = ()) -> None:
        flat = flatten(role, queue, index, stats, gauges)
        previous = self._last.get(identity, {})
        totals = self.totals
        for key, value in flat.items():
            delta = value - previous.get(key, 0)
            if delta > 0:
                totals[key] = totals.get(key, 0) + delta
        merged = dict(previous)
        merged.update(flat)   # a key missing from one record must not count twice later
        self._last[identity] = merged

    def forget(self, identity: str) -> None:
        """The child is gone and its final record is in; its totals stay."""
        self._last.pop(identity, None)

    def add(self, key: Key, n: float = 1) -> None:
        self.totals[key] = self.totals.get(key, 0) + n

    def get(self, key: Key, default: float = 0) -> float:
        return self.totals.get(key, default)

    def items(self, kind: type[K]) -> Iterator[tuple[K, float]]:
        for key, value in self.totals.items():
            if isinstance(key, kind):
                yield key, value

    def sum(self, name: str) -> float:
        """A counter the children report, summed over every role and queue."""
        return sum(value for key, value in self.items(RoleCounter) if key.name == name)
