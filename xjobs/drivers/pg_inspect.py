"""The Postgres driver's operator verbs: list, show, dead letters, cancel, requeue, stats.

Mixed into ``PostgresDriver``: the queue's hot path stays in ``postgres.py``, the reads an
operator (``xjobsd jobs``) or the supervisor's statistics round make live here. Every
statement still comes from ``queries.sql``.
"""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import errors as pg_errors

from ..errors import DuplicateJob, JobNotFound, NotCancellable, NotRetryable
from .base import JobView, ListFilter, QueueSummary, check_row_limit


def _view(row: Sequence[Any], payload: Any = None, history: tuple = ()) -> JobView:
    return JobView(id=row[0], name=row[1], queue=row[2], state=row[3], attempt=row[4],
                   max_attempts=row[5], tenant=row[6], idempotency_key=row[7], priority=row[8],
                   run_at=row[9], last_error=row[10], created_at=row[11], finished_at=row[12],
                   enqueued_by=row[13], claimed_by=row[14], lease_expires_at=row[15],
                   payload=payload, history=history)



class InspectMixin:
    def job_list(self, where: ListFilter) -> list[JobView]:
        limit = check_row_limit(where.limit)
        with self._cursor() as cur:
            cur.execute(self._sql["job_list"], {"queue": where.queue, "name": where.name,
                                                "state": where.state, "limit": limit})
            return [_view(r) for r in cur.fetchall()]

    def job_get(self, job_id: int) -> JobView:
        with self._cursor() as cur:
            cur.execute(self._sql["job_get"], {"id": job_id})
            row = cur.fetchone()
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            cur.execute(self._sql["job_history"], {"id": job_id})
            history = tuple({"at": h[0], "attempt": h[1], "outcome": h[2], "error": h[3]}
                            for h in cur.fetchall())
        return _view(row, payload=row[16], history=history)

    def job_dead(self, limit: int = 50) -> list[JobView]:
        return self.job_list(ListFilter(state="dead", limit=limit))

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        with self._cursor() as cur:
            cur.execute(self._sql["job_cancel"], {**self._now(), "id": job_id,
                                                  "reason": reason or "cancelled"})
            done = cur.fetchone() is not None
        view = self.job_get(job_id)
        if not done:
            raise NotCancellable(f"job {job_id} is {view.state}; only ready, running or suspended jobs can be cancelled")
        return view

    def job_requeue(self, job_id: int) -> JobView:
        try:
            with self._cursor() as cur:
                cur.execute(self._sql["job_requeue"], {**self._now(), "id": job_id})
                done = cur.fetchone() is not None
        except pg_errors.UniqueViolation:
            raise DuplicateJob(f"job {job_id}: a live job already holds its idempotency key") from None
        view = self.job_get(job_id)
        if not done:
            raise NotRetryable(f"job {job_id} is {view.state}; only dead or cancelled jobs can be retried")
        with self._cursor() as cur:
            self._wake(cur, [(view.id, view.queue, "ready")])
        return view

    def job_stats(self) -> dict[str, dict[str, int]]:
        with self._cursor() as cur:
            cur.execute(self._sql["job_stats"])
            stats: dict[str, dict[str, int]] = {}
            for queue, state, count in cur.fetchall():
                stats.setdefault(queue, {})[state] = count
        return stats

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """Live states and dead letters per queue, each from its own partial index."""
        with self._cursor() as cur:
            cur.execute(self._sql["queue_counts"])
            counts: dict[str, dict[str, int]] = {}
            for queue, state, count in cur.fetchall():
                counts.setdefault(queue, {})[state] = count
        return counts

    def queue_summary(self) -> dict[str, QueueSummary]:
        with self._cursor() as cur:
            cur.execute(self._sql["queue_summary"], self._now())
            return {q: QueueSummary(depth=n, oldest_ready_ms=age) for q, n, age in cur.fetchall()}
