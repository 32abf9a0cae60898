"""The Postgres driver's ``Introspection``, the operator's verbs: list, show, cancel, requeue
(one and in batches), retry from a step, count.

What ``xjobsd jobs`` and ``admin.py`` do to jobs, each through its statement in
``queries.sql``. Filters and batches arrive checked (``refusals.py``). What a statement did
to one job is read as an ``Outcome``, and ``refusals`` turns it into the job or the refusal
it means, with the text every driver uses.
"""

from __future__ import annotations

from typing import Any, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import tuple_row

from ..errors import DuplicateJob
from .base import (Batch, CallerConnection, DeadGroup, Introspection, JobView, ListFilter, Matching,
                   RunningJob, RunningPage)
from .pg_database import PgDatabase, driver_error, first_row
from .pg_plan import Plan, run_async, run_on
from .pg_step_writes import record
from .records import CANCEL_HOLDER_BYTES, CANCEL_NAMED, ERROR_GROUP_WIDTH, HistoryEntry, KeyPlace
from .records_steps import StepRecord
from .refusals import Outcome, cancelled, job_not_found, reopened, requeued


def _view(row: Sequence[Any], payload: Any = None, history: tuple[HistoryEntry, ...] = (),
          traceparent: str | None = None, steps: tuple[StepRecord, ...] = ()) -> JobView:
    started_at, result = (row[20], row[21]) if len(row) > 21 else (None, None)   # job_get's row, not job_list's
    key = None
    if len(row) > 22 and row[22] is not None:   # job_get's row of a keyed job
        key = KeyPlace(row[22], row[23], bool(row[24]), bool(row[25]), tuple(row[26]))
    fair_key = row[27] if len(row) > 27 else None   # job_get's row: the key of its fair claims
    snoozes, base_priority = (row[28], row[29]) if len(row) > 29 else (0, None)
    return JobView(id=row[0], name=row[1], queue=row[2], state=row[3], attempt=row[4],
                   max_attempts=row[5], tenant=row[6], idempotency_key=row[7], priority=row[8],
                   run_at=row[9], last_error=row[10], created_at=row[11], finished_at=row[12],
                   enqueued_by=row[13], claimed_by=row[14], lease_expires_at=row[15],
                   crashes=row[16], progress=row[17], payload=payload, history=history,
                   traceparent=traceparent, steps=steps, started_at=started_at,
                   result=result, key=key, fair_key=fair_key, snoozes=snoozes,
                   base_priority=base_priority)


def _history(rows: Sequence[Sequence[Any]]) -> tuple[HistoryEntry, ...]:
    return tuple(HistoryEntry(at=h[0], attempt=h[1], outcome=h[2], error=h[3], traceback=h[4]) for h in rows)


# A read as the statements it runs (``pg_plan``): a pooled cursor, the application's connection
# and its AsyncConnection all run the one read, so what they answer cannot drift apart.
Reads = Plan["JobView | None"]


def job_reads(db: PgDatabase, job_id: int) -> Reads:
    """``job_get`` (None: no such job), ``job_history``, ``step_list``."""
    found = yield "job_get", {"id": job_id}
    if not found:
        return None
    history = yield "job_history", {"id": job_id}
    steps = yield "step_list", {**db.now(), "id": job_id}
    row = found[0]
    return _view(row, payload=row[18], history=_history(history), traceparent=row[19],
                 steps=tuple(record(r[1:]) for r in steps if r[1] is not None))


def _filters(where: ListFilter) -> dict[str, Any]:
    return {"queue": where.queue, "name": where.name, "state": where.state, "tenant": where.tenant,
            "since": where.since_ms, "until": where.until_ms, "error": where.error,
            "since_ago": where.since_ago_ms, "until_ago": where.until_ago_ms,
            "error_group": where.error_group, "width": ERROR_GROUP_WIDTH, "parent": where.parent_id}


class PgOperator(Introspection):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def job_list(self, where: ListFilter) -> list[JobView]:
        """``job_list`` (newest first, before ``before_id``) or ``job_list_after`` (oldest first)."""
        params = {**self._db.now(), **_filters(where), "limit": where.limit}
        if where.after_id is not None:
            statement, params["after"] = "job_list_after", where.after_id
        else:
            statement, params["before"] = "job_list", where.before_id
        with self._db.cursor() as cur:
            cur.execute(self._db.sql[statement], params)
            return [_view(r) for r in cur.fetchall()]

    def job_running(self, page: RunningPage) -> list[RunningJob]:
        """``job_running``: newest started first, before the cursor."""
        started_before, before = page.before or (None, None)
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_running"], {"queue": page.queue, "limit": page.limit,
                                                      "started_before": started_before, "before": before})
            return [RunningJob(*row) for row in cur.fetchall()]

    def job_get(self, job_id: int, conn: CallerConnection | None = None) -> JobView:
        """``job_get`` with ``job_history``, and its steps (``step_list``); on the application's
        ``conn`` when given (in its transaction: a job it enqueued and has not committed yet is
        found), else on the verbs' pool."""
        with self._db.cursor(conn) as cur:
            view = run_on(cur, self._db.sql, job_reads(self._db, job_id))
        if view is None:
            raise job_not_found(job_id)
        return view

    async def job_get_async(self, conn: psycopg.AsyncConnection[Any], job_id: int) -> JobView:
        """``job_get`` awaited on the application's ``AsyncConnection``: the same statements."""
        try:
            # the application's connection may hand rows back as dicts; a plan reads columns by position
            async with conn.cursor(row_factory=tuple_row) as cur:
                view = await run_async(cur, self._db.sql, job_reads(self._db, job_id))
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
        if view is None:
            raise job_not_found(job_id)
        return view

    def _get(self, job_id: int) -> JobView | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_get"], {"id": job_id})
            row = cur.fetchone()
            if row is None:
                return None
            cur.execute(self._db.sql["job_history"], {"id": job_id})
            history = _history(cur.fetchall())
        return _view(row, payload=row[18], history=history, traceparent=row[19])

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        """``job_cancel``: only a live job; a running one loses its lease."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_cancel"], {**self._db.now(), **self._told(), "id": job_id,
                                                     "reason": reason})
            done = cur.fetchone() is not None
            self._db.settled(cur, [job_id] if done else [])
        return cancelled(job_id, Outcome(self._get(job_id), done))

    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView:
        """``job_requeue``: a dead or cancelled job runs again from attempt 0; its queue is woken."""
        with self._db.cursor() as cur:
            try:
                cur.execute(self._db.sql["job_requeue"], {**self._db.now(), "id": job_id, "reason": reason})
            except pg_errors.UniqueViolation:
                return requeued(job_id, Outcome(None, False, key_held=True))
            done = cur.fetchone() is not None
        view = self._get(job_id)
        if done and view is not None:
            with self._db.cursor() as cur:
                self._db.notify(cur, [(view.id, view.queue, "ready")])
        return requeued(job_id, Outcome(view, done))

    def step_reopen(self, job_id: int, name: str) -> JobView:
        """``step_reopen``; the job's steps, as ``job_get`` reads them, tell a step never recorded
        from a job that is not finished."""
        with self._db.cursor() as cur:
            try:
                cur.execute(self._db.sql["step_reopen"], {**self._db.now(), "id": job_id, "name": name})
            except pg_errors.UniqueViolation:
                return reopened(job_id, name, Outcome(None, False, key_held=True), lambda: self.job_get(job_id))
            row = cur.fetchone()
            if row is not None:
                self._db.notify(cur, [(row[0], row[1], "ready")])
        return reopened(job_id, name, Outcome(None, row is not None), lambda: self.job_get(job_id))

    def job_requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]:
        """``job_requeue_batch``: every picked id, with its queue when it was requeued."""
        with self._db.cursor() as cur:
            try:
                cur.execute(self._db.sql["job_requeue_batch"], {**self._batch(batch), "reason": reason})
            except pg_errors.UniqueViolation:
                # an enqueue took one of these keys between the check and the update
                raise DuplicateJob("a live job took a key of this batch meanwhile; run the verb again") from None
            picked = [(r[0], r[1]) for r in cur.fetchall()]
            self._db.notify(cur, [(i, q, "ready") for i, q in picked if q is not None])
        return picked

    def job_cancel_batch(self, batch: Batch, reason: str) -> list[int]:
        """``job_cancel_batch``: every picked live job is cancelled."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_cancel_batch"], {**self._batch(batch), **self._told(),
                                                           "named": CANCEL_NAMED, "reason": reason})
            ids = [r[0] for r in cur.fetchall()]
            self._db.settled(cur, ids)
            return ids

    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]:
        """``job_dead_groups``: dead letters by queue, name and the start of their error."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_dead_groups"], {"width": ERROR_GROUP_WIDTH, "limit": limit})
            return [DeadGroup(*row) for row in cur.fetchall()]

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        """``job_count_matching``: how many, and the newest id among them."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_count_matching"], {**self._db.now(), **_filters(where),
                                                             "states": list(states)})
            return Matching(*first_row(cur))

    def _told(self) -> dict[str, Any]:
        """Where a cancel tells a running job's worker, and which holders it can name."""
        return {"channel": self._db.cancel_channel, "holder_bytes": CANCEL_HOLDER_BYTES}

    def _batch(self, batch: Batch) -> dict[str, Any]:
        return {**self._db.now(), **_filters(batch.where), "after": batch.after_id,
                "upto": batch.upto_id, "limit": batch.limit}
