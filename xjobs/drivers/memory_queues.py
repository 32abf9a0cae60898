"""The memory driver's ``QueueStore``, queue control and statistics, each a copy of its statement in
``queries.sql``: the fleet-wide pause switch, and the counts metrics and ``xjobsd jobs stats``
read."""

from __future__ import annotations

from typing import Collection, Mapping

from .base import COUNTED_STATES, QueueControl, QueueStore, QueueSummary, RatePoint
from .memory_table import MemoryTable, ts


class MemoryQueues(QueueStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None:
        """``queue_set_paused``."""
        with self._table.lock:
            self._table.paused[queue] = (paused, self._table.now(), by)

    def queue_control(self) -> list[QueueControl]:
        """``queue_control``: every queue ever paused or resumed, by name."""
        with self._table.lock:
            return [QueueControl(name, paused, at, by)
                    for name, (paused, at, by) in sorted(self._table.paused.items())]

    def queue_summary(self) -> dict[str, QueueSummary]:
        """``queue_summary``: ready-now depth and oldest ready-now ``run_at`` per queue."""
        table = self._table
        with table.lock:
            at = table.now()
            oldest: dict[str, tuple[int, float]] = {}
            for row in table.rows.values():
                if row.state == "ready" and row.run_at <= at:
                    depth, first = oldest.get(row.queue, (0, row.run_at))
                    oldest[row.queue] = (depth + 1, min(first, row.run_at))
        return {q: QueueSummary(depth=n, oldest_ready_ms=ts(at - first))
                for q, (n, first) in oldest.items()}

    def queue_waiting(self) -> dict[str, dict[str, int]]:
        """``queue_waiting``: waiting keyed members and ready jobs due later, by reason."""
        counts: dict[str, dict[str, int]] = {}
        with self._table.lock:
            at = self._table.now()
            for row in self._table.rows.values():
                if row.state == "suspended" and row.key_run_at is not None:
                    reason = "sequence" if row.key_cap == 1 else "key"
                elif row.state == "ready" and row.run_at > at:
                    reason = "rate" if row.rate_key is not None else "snoozed" if row.snoozes > 0 else "scheduled"
                else:
                    continue
                bucket = counts.setdefault(row.queue, {})
                bucket[reason] = bucket.get(reason, 0) + 1
        return counts

    def queue_unknown(self, names: Collection[str]) -> dict[str, int]:
        """``queue_unknown``: ready jobs of names not in ``names``, per queue."""
        with self._table.lock:
            counts: dict[str, int] = {}
            for row in self._table.rows.values():
                if row.state == "ready" and row.name not in names:
                    counts[row.queue] = counts.get(row.queue, 0) + 1
            return counts

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """``rate_add``: runs that ended since a worker's last report, into this minute."""
        with self._table.lock:
            minute = _minute(self._table.now())
            for queue, per in counts.items():
                for outcome, n in per.items():
                    key = (queue, minute, outcome)
                    self._table.rates[key] = self._table.rates.get(key, 0) + n

    def rate_series(self, since_ms: float) -> list[RatePoint]:
        """``rate_series``: every minute row since ``since_ms`` ago, oldest first."""
        with self._table.lock:
            first = _minute(self._table.now() - since_ms)
            return [RatePoint(queue, minute, outcome, n)
                    for (queue, minute, outcome), n in sorted(self._table.rates.items(),
                                                              key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))
                    if minute >= first]

    def rate_prune(self, retention_ms: float) -> int:
        """``rate_prune``: minutes older than the retention."""
        with self._table.lock:
            cutoff = self._table.now() - retention_ms
            old = [key for key in self._table.rates if key[1] < cutoff]
            for key in old:
                del self._table.rates[key]
            return len(old)

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """``queue_counts``: the states the hot indexes hold, and the ready suspects."""
        counts: dict[str, dict[str, int]] = {}
        with self._table.lock:
            for row in self._table.rows.values():
                keys = [row.state] if row.state in COUNTED_STATES else []
                if row.state == "ready" and row.crashes > 0:
                    keys.append("quarantined")
                for key in keys:
                    bucket = counts.setdefault(row.queue, {})
                    bucket[key] = bucket.get(key, 0) + 1
        return counts

    def job_stats(self) -> dict[str, dict[str, int]]:
        """``job_stats``: every row counted once, under its queue and state."""
        stats: dict[str, dict[str, int]] = {}
        with self._table.lock:
            for row in self._table.rows.values():
                bucket = stats.setdefault(row.queue, {})
                bucket[row.state] = bucket.get(row.state, 0) + 1
        return stats


def _minute(at_ms: float) -> float:
    """``date_trunc('minute', ...)`` of an epoch-ms time."""
    return at_ms - at_ms % 60_000.0
