"""The fleet's throughput over the last hour, for every surface that shows it: the dashboard's
chart and its ``/api/overview``, the throughput tool of ``xjobsd mcp``. Folded from the
per-minute outcome counts workers report (``job_rates``, ``rate_series``), never counted over
finished rows; a minute with no runs is there, with zeros."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .drivers.base import JobDriver, RatePoint
from .workers.rates import RATED as ENDED

CHART_MINUTES = 60
FAILED = ("retried", "dead")   # of the outcomes workers report (ENDED), those that failed


@dataclass
class Minute:
    at: float
    ended: int = 0
    failed: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failed / self.ended if self.ended else 0.0


@dataclass
class Throughput:
    """The last ``CHART_MINUTES`` minutes, fleet-wide and per queue."""
    minutes: list[Minute]
    per_queue: dict[str, dict[str, int]] = field(default_factory=dict)   # queue -> ended, failed

    @property
    def ended(self) -> int:
        return sum(m.ended for m in self.minutes)

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.minutes)

    def as_json(self) -> dict[str, Any]:
        """As the dashboard's ``/api/overview`` and ``xjobsd mcp``'s throughput tool answer it
        (``plain`` makes each minute's ``at`` ISO-8601)."""
        return {"ended": self.ended, "failed": self.failed, "minutes": self.minutes, "per_queue": self.per_queue}


def throughput(points: Iterable[RatePoint], now_ms: float, minutes: int = CHART_MINUTES) -> Throughput:
    """Outcome counts folded into one row per minute (the empty minutes included)."""
    last = now_ms - now_ms % 60_000.0
    chart = [Minute(last - (minutes - 1 - i) * 60_000.0) for i in range(minutes)]
    first = chart[0].at
    per_queue: dict[str, dict[str, int]] = {}
    for point in points:
        if point.outcome not in ENDED or point.minute < first:
            continue
        index = min(int((point.minute - first) // 60_000.0), minutes - 1)
        failed = point.count if point.outcome in FAILED else 0
        chart[index].ended += point.count
        chart[index].failed += failed
        totals = per_queue.setdefault(point.queue, {"ended": 0, "failed": 0})
        totals["ended"] += point.count
        totals["failed"] += failed
    return Throughput(chart, per_queue)


def last_hour(driver: JobDriver) -> Throughput:
    """The last ``CHART_MINUTES`` minutes up to the database's now."""
    return throughput(driver.rate_series(CHART_MINUTES * 60_000.0), driver.clock_now_ms())
