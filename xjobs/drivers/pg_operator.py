"""The Postgres driver's operator verbs: list, show, cancel, requeue (one and in batches), count.

What ``xjobsd jobs`` and ``admin.py`` do to jobs, each through its statement in
``queries.sql``. Filters and batches arrive checked (``refusals.py``); what a verb did to
one job comes back as an ``Outcome``, and the facade raises the refusal it means.
"""

from __future__ import annotations

from typing import Any, Sequence

from psycopg import errors as pg_errors

from ..errors import DuplicateJob
from .backend import Batch, Outcome
from .base import DeadGroup, JobView, ListFilter, Matching
from .records import ERROR_GROUP_WIDTH
from .pg_database import PgDatabase, first_row


def _view(row: Sequence[Any], payload: Any = None, history: tuple[dict, ...] = (),
          traceparent: str | None = None) -> JobView:
    return JobView(id=row[0], name=row[1], queue=row[2], state=row[3], attempt=row[4],
                   max_attempts=row[5], tenant=row[6], idempotency_key=row[7], priority=row[8],
                   run_at=row[9], last_error=row[10], created_at=row[11], finished_at=row[12],
                   enqueued_by=row[13], claimed_by=row[14], lease_expires_at=row[15],
                   crashes=row[16], progress=row[17], payload=payload, history=history,
                   traceparent=traceparent)


def _filters(where: ListFilter) -> dict[str, Any]:
    return {"queue": where.queue, "name": where.name, "state": where.state, "tenant": where.tenant,
            "since": where.since_ms, "until": where.until_ms, "error": where.error,
            "since_ago": where.since_ago_ms, "until_ago": where.until_ago_ms,
            "error_group": where.error_group, "width": ERROR_GROUP_WIDTH}


class PgOperator:
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def find(self, where: ListFilter) -> list[JobView]:
        """``job_list`` (newest first, before ``before_id``) or ``job_list_after`` (oldest first)."""
        params = {**self._db.now(), **_filters(where), "limit": where.limit}
        if where.after_id is not None:
            statement, params["after"] = "job_list_after", where.after_id
        else:
            statement, params["before"] = "job_list", where.before_id
        with self._db.cursor() as cur:
            cur.execute(self._db.sql[statement], params)
            return [_view(r) for r in cur.fetchall()]

    def get(self, job_id: int) -> JobView | None:
        """``job_get`` with ``job_history``."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_get"], {"id": job_id})
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute(self._db.sql["job_history"], {"id": job_id})
            history = tuple({"at": h[0], "attempt": h[1], "outcome": h[2], "error": h[3], "traceback": h[4]}
                            for h in cur.fetchall())
        return _view(row, payload=row[18], history=history, traceparent=row[19])

    def cancel(self, job_id: int, reason: str) -> Outcome:
        """``job_cancel``: only a live job; a running one loses its lease."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_cancel"], {**self._db.now(), "id": job_id, "reason": reason})
            done = cur.fetchone() is not None
        return Outcome(self.get(job_id), done)

    def requeue(self, job_id: int, reason: str | None) -> Outcome:
        """``job_requeue``: a dead or cancelled job runs again from attempt 0; its queue is woken."""
        try:
            with self._db.cursor() as cur:
                cur.execute(self._db.sql["job_requeue"], {**self._db.now(), "id": job_id, "reason": reason})
                done = cur.fetchone() is not None
        except pg_errors.UniqueViolation:
            return Outcome(None, False, key_held=True)
        view = self.get(job_id)
        if done and view is not None:
            with self._db.cursor() as cur:
                self._db.notify(cur, [(view.id, view.queue, "ready")])
        return Outcome(view, done)

    def requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]:
        """``job_requeue_batch``: every picked id, with its queue when it was requeued."""
        try:
            with self._db.cursor() as cur:
                cur.execute(self._db.sql["job_requeue_batch"], {**self._batch(batch), "reason": reason})
                picked = [(r[0], r[1]) for r in cur.fetchall()]
                self._db.notify(cur, [(i, q, "ready") for i, q in picked if q is not None])
        except pg_errors.UniqueViolation:
            # an enqueue took one of these keys between the check and the update
            raise DuplicateJob("a live job took a key of this batch meanwhile; run the verb again") from None
        return picked

    def cancel_batch(self, batch: Batch, reason: str) -> list[int]:
        """``job_cancel_batch``: every picked live job is cancelled."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_cancel_batch"], {**self._batch(batch), "reason": reason})
            return [r[0] for r in cur.fetchall()]

    def dead_groups(self, limit: int) -> list[DeadGroup]:
        """``job_dead_groups``: dead letters by queue, name and the start of their error."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_dead_groups"], {"width": ERROR_GROUP_WIDTH, "limit": limit})
            return [DeadGroup(*row) for row in cur.fetchall()]

    def count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        """``job_count_matching``: how many, and the newest id among them."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_count_matching"], {**self._db.now(), **_filters(where),
                                                             "states": list(states)})
            return Matching(*first_row(cur))

    def _batch(self, batch: Batch) -> dict[str, Any]:
        return {**self._db.now(), **_filters(batch.where), "after": batch.after_id,
                "upto": batch.upto_id, "limit": batch.limit}
