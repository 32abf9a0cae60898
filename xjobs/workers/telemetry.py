"""What a role says about itself in every heartbeat: its stats record.

A role's ``stats()`` answers a dataclass derived from ``RoleStats``: the worker's
``WorkerStats`` (``stats.py``), the scheduler's ``SchedulerStats``, the relay's ``RelayStats``,
the dashboard's ``DashboardStats``, each declared in its role's module and named by its
policy (``RolePolicy.stats``). The record crosses the pipe as one flat JSON object of its
fields (``to_wire``) and the supervisor reads it back into the same class (``from_wire``), so
the supervisor, ``xjobsd status`` and the dashboard read typed figures through the methods
below, never a role's figures by its name:

* ``numbers()``: every figure that is a number, as ``xjobsd status --json`` shows a child's
  ``stats``; those not in ``LEVELS`` are counters, which only grow within one process;
* ``job_counts()``: what the role's runs add to ``/metrics`` (``JobCounts``: empty for a role
  that runs no job), added up across restarts by the supervisor's ``Tally``;
* ``describe()``: the line ``xjobsd status`` prints for the child;
* ``status()``: everything the child's row of ``xjobsd status`` shows from the record.

A value of the wrong type on the wire keeps the field's default: the record comes from this
package's own code in the child, and a figure it cannot read is not worth a child's restart.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, TypeGuard

if TYPE_CHECKING:
    from typing import Self

# what a run can come to: the outcome label of xjobs_jobs_total
OUTCOMES = ("completed", "retried", "dead", "interrupted", "cancelled", "suspended", "shed", "snoozed")
# what runs did with ctx.step (xjobs_steps_total{kind})
STEP_COUNTS = ("run", "replayed", "woke", "delivered", "timed_out")
# seconds; the last bucket (+Inf) is the histogram's count
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 900.0)


@dataclass
class Histogram:
    """Run durations as Prometheus keeps them: ``buckets[i]`` counts the runs that took at most
    ``DURATION_BUCKETS[i]`` seconds (cumulative), ``count`` every run (the +Inf bucket)."""
    buckets: list[float] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    sum: float = 0.0
    count: float = 0

    def observe(self, seconds: float) -> None:
        for i in range(bisect_left(DURATION_BUCKETS, seconds), len(self.buckets)):
            self.buckets[i] += 1
        self.sum += seconds
        self.count += 1

    def copy(self) -> "Histogram":
        return Histogram(list(self.buckets), self.sum, self.count)

    def to_wire(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "sum": self.sum, "count": self.count}

    @classmethod
    def from_wire(cls, value: Any) -> "Histogram | None":
        if not isinstance(value, dict):
            return None
        buckets = value.get("buckets")
        if not (isinstance(buckets, list) and all(_is_number(n) for n in buckets)):
            return None
        total, count = value.get("sum"), value.get("count")
        return cls(list(buckets), total if _is_number(total) else 0.0, count if _is_number(count) else 0)


@dataclass(frozen=True)
class JobCounts:
    """The counters of a child's work on jobs, each growing only within its process: what
    ``/metrics`` adds up per queue across restarts, and what recycling and the lease-lost
    report read."""
    outcomes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # job -> outcome -> runs
    durations: Mapping[str, Histogram] = field(default_factory=dict)         # job -> its run durations
    steps: Mapping[str, int] = field(default_factory=dict)                   # STEP_COUNTS kind -> n
    claimed: int = 0          # runs claimed: what ``--recycle-after-jobs`` counts
    claim_failed: int = 0     # claim rounds the database refused
    lease_lost: int = 0       # leases lost while running


NO_JOBS = JobCounts()


@dataclass
class RoleStats:
    """The base of every role's record: what a role with no figures of its own reports."""

    LEVELS: ClassVar[frozenset[str]] = frozenset({"in_flight"})   # numbers that are not counters

    in_flight: int = 0   # what it holds now: runs for a worker, a round for the scheduler

    def numbers(self) -> dict[str, float]:
        """Every figure that is a number (a flag is not)."""
        return {f.name: value for f in dataclasses.fields(self)
                if _is_number(value := getattr(self, f.name))}

    def counters(self) -> dict[str, float]:
        """The numbers that only grow within one process (``numbers`` less ``LEVELS``)."""
        return {name: n for name, n in self.numbers().items() if name not in self.LEVELS}

    def job_counts(self) -> JobCounts:
        return NO_JOBS

    def describe(self) -> str:
        """One line for ``xjobsd status``: by default its numbers, by name."""
        return ", ".join(f"{name} {n:g}" for name, n in sorted(self.numbers().items()))

    def status(self) -> dict[str, Any]:
        """What the child's row of ``xjobsd status`` shows from the record."""
        return {"running": [], "stats": self.numbers(), "limits": None, "description": self.describe()}

    def to_wire(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> "Self":
        """The record a child sent; fields of other shapes (nested ones) are a subclass's to
        read, in its own ``from_wire``."""
        values: dict[str, Any] = {}
        for name, kind in _scalar_fields(cls).items():
            value = data.get(name)
            if value is not None and _SCALARS[kind](value):
                values[name] = value
        return cls(**values)


def outcomes_from_wire(value: Any) -> dict[str, dict[str, int]]:
    """``{job: {outcome: runs}}`` as sent, less anything not of that shape."""
    if not isinstance(value, dict):
        return {}
    return {job: {outcome: n for outcome, n in counts.items() if _is_count(n)}
            for job, counts in value.items() if isinstance(job, str) and isinstance(counts, dict)}


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_SCALARS: dict[str, Callable[[Any], bool]] = {
    "int": _is_count, "float": _is_number, "str": lambda v: isinstance(v, str), "bool": lambda v: isinstance(v, bool)}
_FIELDS: dict[type, dict[str, str]] = {}


def _scalar_fields(cls: type) -> dict[str, str]:
    """A record's fields of a scalar type (``int``, ``float``, ``str``, ``bool``), by name: read
    from the annotation as written, so a record may annotate with names it imports only for
    the type checker."""
    found = _FIELDS.get(cls)
    if found is None:
        found = {}
        for f in dataclasses.fields(cls):
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if kind in _SCALARS:
                found[f.name] = kind
        _FIELDS[cls] = found
    return found
