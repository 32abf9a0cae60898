"""Totals that survive child restarts: what ``/metrics`` counts never goes backwards.

A child's counters only grow within its own process and start again at zero in the next one.
The supervisor therefore keeps, per child identity, the last snapshot it received, and adds
only the positive difference of each new snapshot to its own running totals. A restarted
child has a new identity, so its first snapshot is all new work; a snapshot that arrives
twice adds nothing. Levels are not accumulated: ``in_flight`` (every role's), and the stats
of the gauges a role's policy declares (``RoleGauge``); they are read from the live
children's latest snapshots.

Keys of ``totals``::

    ("jobs", queue, job, outcome)          -> xjobs_jobs_total
    ("lease_lost", queue)                  -> xjobs_lease_lost_total
    ("duration", queue, job, i)            -> cumulative bucket i of xjobs_job_duration_seconds
    ("duration_sum", queue, job), ("duration_count", queue, job)
    ("counter", role, queue, name)         -> any other whole-number counter a role reports
    ("slot", role, queue, index, name)     -> per-slot totals shown by ``xjobsd status``
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Collection, Iterator

_LEVELS = frozenset({"in_flight"})   # reported by every role: never a counter


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def flatten(role: str, queue: str | None, index: int, stats: dict,
            gauges: Collection[str] = ()) -> dict[tuple, float]:
    """The counters of one snapshot, keyed as in the module docstring; ``gauges`` are the
    stats the role declares as levels."""
    q = queue or ""
    flat: dict[tuple, float] = {}
    for name, value in stats.items():
        if name in _LEVELS or name in gauges:
            continue
        if name == "jobs" and isinstance(value, dict):
            for job, outcomes in value.items():
                if isinstance(outcomes, dict):
                    for outcome, n in outcomes.items():
                        if _number(n):
                            flat[("jobs", q, job, outcome)] = n
        elif name == "durations" and isinstance(value, dict):
            for job, hist in value.items():
                if not isinstance(hist, dict):
                    continue
                for i, n in enumerate(hist.get("buckets", ())):
                    if _number(n):
                        flat[("duration", q, job, i)] = n
                if _number(hist.get("sum")):
                    flat[("duration_sum", q, job)] = hist["sum"]
                if _number(hist.get("count")):
                    flat[("duration_count", q, job)] = hist["count"]
        elif _number(value):
            if name == "lease_lost":
                flat[("lease_lost", q)] = value
            flat[("counter", role, q, name)] = value
            flat[("slot", role, q, index, name)] = value
    return flat


class Tally:
    def __init__(self) -> None:
        self.totals: dict[tuple, float] = {}
        self._last: dict[str, dict[tuple, float]] = {}

    def observe(self, identity: str, role: str, queue: str | None, index: int, stats: dict, *,
                gauges: Collection[str] = ()) -> None:
        flat = flatten(role, queue, index, stats, gauges)
        previous = self._last.get(identity, {})
        totals = self.totals
        for key, value in flat.items():
            delta = value - previous.get(key, 0)
            if delta > 0:
                totals[key] = totals.get(key, 0) + delta
        merged = dict(previous)
        merged.update(flat)   # a key missing from one snapshot must not count twice later
        self._last[identity] = merged

    def forget(self, identity: str) -> None:
        """The child is gone and its final snapshot is in; its totals stay."""
        self._last.pop(identity, None)

    def add(self, key: tuple, n: float = 1) -> None:
        self.totals[key] = self.totals.get(key, 0) + n

    def get(self, key: tuple, default: float = 0) -> float:
        return self.totals.get(key, default)

    def items(self, kind: str) -> Iterator[tuple[tuple, float]]:
        for key, value in self.totals.items():
            if key[0] == kind:
                yield key, value
