"""The memory driver's operator verbs: list, show, cancel, requeue (one and in batches),
counts, statistics and queue control, each a copy of its statement in ``queries.sql``.

Mixed into ``MemoryDriver`` (as ``pg_inspect`` is into the Postgres driver): the queue's hot
path stays in ``memory.py``; these read and steer rows under the same lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

import orjson

from ..errors import InvalidOption, JobNotFound, NotCancellable, NotRetryable
from .base import (COUNTED_STATES, LIVE_STATES, JobView, ListFilter, Matching, QueueControl,
                   QueueSummary, check_filter, check_row_limit, is_bigint)
from .memory_table import Row, ts

if TYPE_CHECKING:
    from .memory import MemoryDriver

_REQUEUABLE = ("dead", "cancelled")


def _matches(row: Row, where: ListFilter, at: float) -> bool:
    """The filters of ``job_list`` and the batch verbs, as the SQL spells them."""
    if where.queue is not None and row.queue != where.queue:
        return False
    if where.name is not None and row.name != where.name:
        return False
    if where.state is not None and row.state != where.state:
        return False
    if where.tenant is not None and row.tenant != where.tenant:
        return False
    when = row.finished_at if row.finished_at is not None else row.created_at
    if where.since_ms is not None and when < ts(where.since_ms):
        return False
    if where.until_ms is not None and when >= ts(where.until_ms):
        return False
    if where.since_ago_ms is not None and when < ts(at - ts(where.since_ago_ms)):
        return False
    if where.until_ago_ms is not None and when >= ts(at - ts(where.until_ago_ms)):
        return False
    if where.error is not None and (row.last_error is None
                                    or where.error.lower() not in row.last_error.lower()):
        return False
    return True


class MemoryInspectMixin:
    def _view(self: "MemoryDriver", row: Row, *, full: bool = False) -> JobView:
        history: tuple[dict, ...] = ()
        if full:
            entries = sorted(enumerate(self._history.get(row.id, ())), key=lambda e: (e[1][0], e[0]))
            history = tuple({"at": at, "attempt": attempt, "outcome": outcome, "error": error}
                            for _, (at, attempt, outcome, error) in entries)
        return JobView(id=row.id, name=row.name, queue=row.queue, state=row.state,
                       attempt=row.attempt, max_attempts=row.max_attempts, tenant=row.tenant,
                       idempotency_key=row.idempotency_key, priority=row.priority,
                       run_at=row.run_at, last_error=row.last_error, created_at=row.created_at,
                       finished_at=row.finished_at, enqueued_by=row.enqueued_by,
                       claimed_by=row.claimed_by, lease_expires_at=row.lease_expires_at,
                       crashes=row.crashes, progress=row.progress,
                       payload=orjson.loads(row.payload) if full else None, history=history)

    def job_list(self: "MemoryDriver", where: ListFilter) -> list[JobView]:
        """``job_list`` (newest first, before ``before_id``) or ``job_list_after`` (oldest first)."""
        where = check_filter(where)
        views: list[JobView] = []
        with self._lock:
            at = self._now()
            rows: Iterator[Row] = iter(self._jobs.values()) if where.after_id is not None \
                else reversed(self._jobs.values())
            for row in rows:
                if len(views) >= where.limit:
                    break
                if where.after_id is not None and row.id <= where.after_id:
                    continue
                if where.before_id is not None and row.id >= where.before_id:
                    continue
                if _matches(row, where, at):
                    views.append(self._view(row))
        return views

    def job_get(self: "MemoryDriver", job_id: int) -> JobView:
        """``job_get`` with ``job_history``."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            return self._view(row, full=True)

    def job_dead(self: "MemoryDriver", limit: int = 50) -> list[JobView]:
        return self.job_list(ListFilter(state="dead", limit=limit))

    def job_cancel(self: "MemoryDriver", job_id: int, reason: str | None = None) -> JobView:
        """``job_cancel``: only a live job can be cancelled; a running one loses its lease."""
        reason = reason or "cancelled"
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            if row.state not in LIVE_STATES:
                raise NotCancellable(f"job {job_id} is {row.state}; only ready, running or suspended jobs can be cancelled")
            self._cancel(row, self._now(), reason)
            return self._view(row, full=True)

    def _cancel(self: "MemoryDriver", row: Row, at: float, reason: str) -> None:
        self._move(row, "cancelled")
        row.finished_at, row.last_error = at, reason
        row.lease_token = row.lease_expires_at = None
        self._record(row.id, at, row.attempt, "cancelled", reason)

    def job_requeue(self: "MemoryDriver", job_id: int) -> JobView:
        """``job_requeue``: a dead or cancelled job runs again from attempt 0."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            if row.state not in _REQUEUABLE:
                raise NotRetryable(f"job {job_id} is {row.state}; only dead or cancelled jobs can be retried")
            self._requeue(row, self._now(), None)   # DuplicateJob when a live job holds the key
            return self._view(row, full=True)

    def _requeue(self: "MemoryDriver", row: Row, at: float, reason: str | None) -> None:
        self._move(row, "ready")
        row.attempt, row.run_at, row.finished_at = 0, at, None
        self._record(row.id, at, 0, "requeued", reason)

    # -- bulk verbs: one bounded batch per call, in id order after ``after_id`` -----------------

    def _batch(self: "MemoryDriver", where: ListFilter, after_id: int, upto_id: int, limit: int,
               states: Sequence[str], at: float) -> list[Row]:
        where = check_filter(where)
        for option, value in (("after", after_id), ("upto", upto_id)):
            if not is_bigint(value):
                raise InvalidOption(option, f"must be a job id, got {value!r}")
        limit = check_row_limit(limit, "batch")
        picked: list[Row] = []
        for row in self._jobs.values():   # id order, like the statement's "order by id"
            if len(picked) >= limit:
                break
            if after_id < row.id <= upto_id and row.state in states and _matches(row, where, at):
                picked.append(row)
        return picked

    def job_requeue_batch(self: "MemoryDriver", where: ListFilter, after_id: int, upto_id: int,
                          limit: int, reason: str | None) -> list[tuple[int, str | None]]:
        """``job_requeue_batch``: per namespace the newest picked row goes back, unless a live
        job holds its key; answers every picked id with its queue when requeued."""
        with self._lock:
            at = self._now()
            picked = self._batch(where, after_id, upto_id, limit, _REQUEUABLE, at)
            chosen: dict[tuple[str, str, str], Row] = {}
            for row in picked:
                if row.namespace not in self._live:
                    if row.namespace not in chosen or chosen[row.namespace].id < row.id:
                        chosen[row.namespace] = row
            for row in sorted(chosen.values(), key=lambda r: r.id):
                self._requeue(row, at, reason)
            done = {row.id for row in chosen.values()}
            return [(row.id, row.queue if row.id in done else None) for row in picked]

    def job_cancel_batch(self: "MemoryDriver", where: ListFilter, after_id: int, upto_id: int,
                         limit: int, reason: str) -> list[int]:
        """``job_cancel_batch``: every picked live job is cancelled."""
        with self._lock:
            at = self._now()
            picked = self._batch(where, after_id, upto_id, limit, LIVE_STATES, at)
            for row in picked:
                self._cancel(row, at, reason)
            return [row.id for row in picked]

    def job_count(self: "MemoryDriver", where: ListFilter, states: Sequence[str]) -> Matching:
        """``job_count_matching``: how many, and the newest id among them."""
        where = check_filter(where)
        with self._lock:
            at = self._now()
            ids = [row.id for row in self._jobs.values() if row.state in states and _matches(row, where, at)]
        return Matching(len(ids), max(ids, default=0))

    # -- statistics and queue control -----------------------------------------------------------

    def job_stats(self: "MemoryDriver") -> dict[str, dict[str, int]]:
        """``job_stats``: every row counted once, under its queue and state."""
        stats: dict[str, dict[str, int]] = {}
        with self._lock:
            for row in self._jobs.values():
                bucket = stats.setdefault(row.queue, {})
                bucket[row.state] = bucket.get(row.state, 0) + 1
        return stats

    def queue_counts(self: "MemoryDriver") -> dict[str, dict[str, int]]:
        """``queue_counts``: the states the hot indexes hold, and the ready suspects."""
        counts: dict[str, dict[str, int]] = {}
        with self._lock:
            for row in self._jobs.values():
                keys = [row.state] if row.state in COUNTED_STATES else []
                if row.state == "ready" and row.crashes > 0:
                    keys.append("quarantined")
                for key in keys:
                    bucket = counts.setdefault(row.queue, {})
                    bucket[key] = bucket.get(key, 0) + 1
        return counts

    def queue_summary(self: "MemoryDriver") -> dict[str, QueueSummary]:
        """``queue_summary``: ready-now depth and oldest ready-now ``run_at`` per queue."""
        with self._lock:
            at = self._now()
            oldest: dict[str, tuple[int, float]] = {}
            for row in self._jobs.values():
                if row.state == "ready" and row.run_at <= at:
                    depth, first = oldest.get(row.queue, (0, row.run_at))
                    oldest[row.queue] = (depth + 1, min(first, row.run_at))
        return {q: QueueSummary(depth=n, oldest_ready_ms=ts(at - first))
                for q, (n, first) in oldest.items()}

    def queue_pause(self: "MemoryDriver", queue: str, paused: bool, by: str | None = None) -> None:
        """``queue_set_paused``."""
        with self._lock:
            self._paused[queue] = (bool(paused), self._now(), by)

    def queue_control(self: "MemoryDriver") -> list[QueueControl]:
        """``queue_control``: every queue ever paused or resumed, by name."""
        with self._lock:
            return [QueueControl(name, paused, at, by)
                    for name, (paused, at, by) in sorted(self._paused.items())]

