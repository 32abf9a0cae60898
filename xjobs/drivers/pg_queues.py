"""The Postgres driver's ``QueueStore``: the fleet-wide pause switch, and the counts the
supervisor's metrics and ``xjobsd jobs stats`` read.

The counts metrics read every few seconds (``queue_counts``, ``queue_summary``,
``queue_waiting``) come from the partial indexes of the live states, never from a scan of the
finished bulk; only ``job_stats``, an operator's question, counts every row.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

import orjson

from .base import QueueControl, QueueStore, QueueSummary, RatePoint
from .pg_database import PgDatabase


class PgQueues(QueueStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None:
        """``queue_set_paused``; a resume wakes the queue's idle workers at once."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["queue_set_paused"], {**self._db.now(), "queue": queue,
                                                           "paused": paused, "by": by})
            if not paused:   # idle workers of the queue claim at once, not at their next poll
                self._db.notify(cur, [(0, queue, "ready")])

    def queue_control(self) -> list[QueueControl]:
        """``queue_control``: every queue ever paused or resumed, by name."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["queue_control"])
            return [QueueControl(*row) for row in cur.fetchall()]

    def queue_summary(self) -> dict[str, QueueSummary]:
        """``queue_summary``: ready-now depth and the age of the oldest ready-now job."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["queue_summary"], self._db.now())
            return {q: QueueSummary(depth=n, oldest_ready_ms=age) for q, n, age in cur.fetchall()}

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """``queue_counts``: live states and dead letters per queue, each from its own index."""
        return self._per_queue("queue_counts")

    def queue_waiting(self) -> dict[str, dict[str, int]]:
        """``queue_waiting``: waiting keyed members and ready jobs due later, by reason."""
        return self._per_queue("queue_waiting", self._db.now())

    def queue_unknown(self, names: Collection[str]) -> dict[str, int]:
        """``queue_unknown``: ready jobs of names not in ``names``, per queue."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["queue_unknown"], {"names": sorted(names)})
            return {queue: int(count) for queue, count in cur.fetchall()}

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """``rate_add``: runs that ended since a worker's last report, into this minute."""
        rows = [{"q": queue, "o": outcome, "c": n} for queue, per in counts.items()
                for outcome, n in per.items()]
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["rate_add"], {**self._db.now(), "rates": orjson.dumps(rows).decode()})

    def rate_series(self, since_ms: float) -> list[RatePoint]:
        """``rate_series``: every minute row since ``since_ms`` ago, oldest first."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["rate_series"], {**self._db.now(), "since": since_ms})
            return [RatePoint(*row) for row in cur.fetchall()]

    def rate_prune(self, retention_ms: float) -> int:
        """``rate_prune``: minutes older than the retention."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["rate_prune"], {**self._db.now(), "retention": retention_ms})
            return cur.rowcount

    def job_stats(self) -> dict[str, dict[str, int]]:
        """``job_stats``: every row counted once, under its queue and state."""
        return self._per_queue("job_stats")

    def _per_queue(self, statement: str, params: Mapping[str, Any] | None = None) -> dict[str, dict[str, int]]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql[statement], params)
            counts: dict[str, dict[str, int]] = {}
            for queue, state, count in cur.fetchall():
                counts.setdefault(queue, {})[state] = count
        return counts
