"""The Postgres driver's operator verbs: list, show, dead letters, cancel, requeue, stats.

Mixed into ``PostgresDriver``: the queue's hot path stays in ``postgres.py``, the reads an
operator (``xjobsd jobs``) or the supervisor's statistics round make live here. Every
statement still comes from ``queries.sql``.
"""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import errors as pg_errors

from ..errors import DuplicateJob, InvalidOption, JobNotFound, NotCancellable, NotRetryable
from .base import (JobView, ListFilter, Matching, QueueControl, QueueSummary, check_filter,
                   check_row_limit, is_bigint)


def _view(row: Sequence[Any], payload: Any = None, history: tuple = ()) -> JobView:
    return JobView(id=row[0], name=row[1], queue=row[2], state=row[3], attempt=row[4],
                   max_attempts=row[5], tenant=row[6], idempotency_key=row[7], priority=row[8],
                   run_at=row[9], last_error=row[10], created_at=row[11], finished_at=row[12],
                   enqueued_by=row[13], claimed_by=row[14], lease_expires_at=row[15],
                   crashes=row[16], progress=row[17], payload=payload, history=history)


def _filters(where: ListFilter) -> dict[str, Any]:
    return {"queue": where.queue, "name": where.name, "state": where.state, "tenant": where.tenant,
            "since": where.since_ms, "until": where.until_ms, "error": where.error,
            "since_ago": where.since_ago_ms, "until_ago": where.until_ago_ms}


class InspectMixin:
    def job_list(self, where: ListFilter) -> list[JobView]:
        where = check_filter(where)
        params = {**self._now(), **_filters(where), "limit": where.limit}
        if where.after_id is not None:
            statement, params["after"] = "job_list_after", where.after_id
        else:
            statement, params["before"] = "job_list", where.before_id
        with self._cursor() as cur:
            cur.execute(self._sql[statement], params)
            return [_view(r) for r in cur.fetchall()]

    def job_requeue_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                          reason: str | None) -> list[tuple[int, str | None]]:
        """One batch of a bulk retry: every picked id, with its queue when it was requeued
        (None: its key is held by a live job, so it stays as it is)."""
        params = self._batch_params(where, after_id, upto_id, limit)
        try:
            with self._cursor() as cur:
                cur.execute(self._sql["job_requeue_batch"], {**params, "reason": reason})
                picked = [(r[0], r[1]) for r in cur.fetchall()]
                self._wake(cur, [(i, q, "ready") for i, q in picked if q is not None])
        except pg_errors.UniqueViolation:
            # an enqueue took one of these keys between the check and the update
            raise DuplicateJob("a live job took a key of this batch meanwhile; run the verb again") from None
        return picked

    def job_cancel_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                         reason: str) -> list[int]:
        params = self._batch_params(where, after_id, upto_id, limit)
        with self._cursor() as cur:
            cur.execute(self._sql["job_cancel_batch"], {**params, "reason": reason})
            return [r[0] for r in cur.fetchall()]

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        where = check_filter(where)
        with self._cursor() as cur:
            cur.execute(self._sql["job_count_matching"], {**self._now(), **_filters(where),
                                                          "states": list(states)})
            return Matching(*cur.fetchone())

    def _batch_params(self, where: ListFilter, after_id: int, upto_id: int, limit: int) -> dict[str, Any]:
        where = check_filter(where)
        for option, value in (("after", after_id), ("upto", upto_id)):
            if not is_bigint(value):
                raise InvalidOption(option, f"must be a job id, got {value!r}")
        return {**self._now(), **_filters(where), "after": after_id, "upto": upto_id,
                "limit": check_row_limit(limit, "batch")}

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None:
        with self._cursor() as cur:
            cur.execute(self._sql["queue_set_paused"], {**self._now(), "queue": queue,
                                                        "paused": bool(paused), "by": by})
            if not paused:   # idle workers of the queue claim at once, not at their next poll
                self._wake(cur, [(0, queue, "ready")])

    def queue_control(self) -> list[QueueControl]:
        with self._cursor() as cur:
            cur.execute(self._sql["queue_control"])
            return [QueueControl(*row) for row in cur.fetchall()]

    def job_get(self, job_id: int) -> JobView:
        with self._cursor() as cur:
            cur.execute(self._sql["job_get"], {"id": job_id})
            row = cur.fetchone()
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            cur.execute(self._sql["job_history"], {"id": job_id})
            history = tuple({"at": h[0], "attempt": h[1], "outcome": h[2], "error": h[3]}
                            for h in cur.fetchall())
        return _view(row, payload=row[18], history=history)

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
