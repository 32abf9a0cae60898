"""The memory driver's ``Introspection``, the operator's verbs: list, show, cancel, requeue (one
and in batches), retry from a step and count, each a copy of its statement in ``queries.sql``,
on the one ``MemoryTable``.

Filters and batches arrive checked (``refusals.py``). What a verb did to one job is read as
an ``Outcome``, and ``refusals`` turns it into the job or the refusal it means, with the same
text as for every driver.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Iterable, Sequence

import orjson

from .base import LIVE_STATES, Batch, DeadGroup, Introspection, JobView, ListFilter, Matching, RunningJob, RunningPage
from .memory_keyed import place_of
from .memory_steps import MemorySteps
from .memory_table import MemoryTable, Namespace, Row, ts
from .records import ERROR_GROUP_WIDTH, HistoryEntry
from .refusals import Outcome, cancelled, job_not_found, reopened, requeued

_REQUEUABLE = ("dead", "cancelled")
_REOPENABLE = ("completed", "dead", "cancelled")


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
    if where.parent_id is not None and row.parent_id != where.parent_id:
        return False
    if where.error_group is not None and (row.last_error or "")[:ERROR_GROUP_WIDTH] != where.error_group:
        return False
    return True


class MemoryOperator(Introspection):
    def __init__(self, table: MemoryTable, steps: MemorySteps) -> None:
        self._table = table
        self._steps = steps

    def _view(self, row: Row, *, full: bool = False) -> JobView:
        """A row as ``job_list`` (``full=False``) or ``job_get`` with ``job_history`` shows it."""
        history: tuple[HistoryEntry, ...] = ()
        if full:
            entries = sorted(enumerate(self._table.history.get(row.id, ())), key=lambda e: (e[1][0], e[0]))
            history = tuple({"at": at, "attempt": attempt, "outcome": outcome, "error": error,
                             "traceback": trace}
                            for _, (at, attempt, outcome, error, trace) in entries)
        return JobView(id=row.id, name=row.name, queue=row.queue, state=row.state,
                       attempt=row.attempt, max_attempts=row.max_attempts, tenant=row.tenant,
                       idempotency_key=row.idempotency_key, priority=row.priority,
                       run_at=row.run_at, last_error=row.last_error, created_at=row.created_at,
                       finished_at=row.finished_at, enqueued_by=row.enqueued_by,
                       claimed_by=row.claimed_by, lease_expires_at=row.lease_expires_at,
                       crashes=row.crashes, progress=row.progress,
                       payload=orjson.loads(row.payload) if full else None, history=history,
                       traceparent=row.traceparent if full else None,
                       started_at=row.started_at if full else None,
                       result=orjson.loads(row.result) if full and row.result is not None else None,
                       key=place_of(self._table, row) if full else None,
                       fair_key=row.fair_key if full else None,
                       snoozes=row.snoozes if full else 0,
                       base_priority=row.base_priority if full else None)

    def job_list(self, where: ListFilter) -> list[JobView]:
        """``job_list`` (newest first, before ``before_id``) or ``job_list_after`` (oldest first)."""
        table = self._table
        views: list[JobView] = []
        with table.lock:
            at = table.now()
            rows: Iterable[Row] = table.rows.values() if where.after_id is not None \
                else reversed(table.rows.values())
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

    def job_running(self, page: RunningPage) -> list[RunningJob]:
        """``job_running``: newest started first (then the higher id), before the cursor."""
        table = self._table
        with table.lock:
            running = [(row.started_at if row.started_at is not None else row.created_at, row)
                       for row in table.rows.values()
                       if row.state == "running" and page.queue in (None, row.queue)]
            cursor = None if page.before is None else (ts(page.before[0]), page.before[1])
            picked = heapq.nlargest(page.limit, ((at, row.id, row) for at, row in running
                                                 if cursor is None or (at, row.id) < cursor),
                                    key=lambda entry: (entry[0], entry[1]))
            return [RunningJob(row.id, row.name, row.queue, row.attempt, row.max_attempts, row.tenant,
                               row.claimed_by, at, row.lease_expires_at, row.progress)
                    for at, _, row in picked]

    def job_get(self, job_id: int) -> JobView:
        """``job_get`` with ``job_history``, and its steps (``step_list``)."""
        with self._table.lock:
            row = self._table.rows.get(job_id)
            view = None if row is None else self._view(row, full=True)
        if view is None:
            raise job_not_found(job_id)
        return replace(view, steps=self._steps.step_list(job_id, for_run=False).steps)

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        """``job_cancel``: only a live job can be cancelled; a running one loses its lease."""
        return cancelled(job_id, self._cancel_one(job_id, reason))

    def _cancel_one(self, job_id: int, reason: str | None) -> Outcome:
        table = self._table
        with table.lock:
            row = table.rows.get(job_id)
            if row is None:
                return Outcome(None, False)
            done = row.state in LIVE_STATES or (row.state == "dead" and row.key_hold)   # a held place too
            if done and (holder := self._cancel(row, table.now(), reason)) is not None:
                table.tell_cancelled({holder: [row.id]})
            return Outcome(self._view(row, full=True), done)

    def _cancel(self, row: Row, at: float, reason: str | None) -> str | None:
        """Cancel a live row; answers the worker to tell when it was running."""
        holder = row.claimed_by if row.state == "running" else None
        self._table.move(row, "cancelled")
        row.finished_at, row.last_error = at, reason
        row.lease_token = row.lease_expires_at = None
        self._table.record(row.id, at, row.attempt, "cancelled", reason)
        return holder

    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView:
        """``job_requeue``: a dead or cancelled job runs again from attempt 0, unless a live
        job holds its key (the unique index refuses it)."""
        return requeued(job_id, self._requeue_one(job_id, reason))

    def _requeue_one(self, job_id: int, reason: str | None) -> Outcome:
        table = self._table
        with table.lock:
            row = table.rows.get(job_id)
            if row is None:
                return Outcome(None, False)
            if row.state not in _REQUEUABLE:
                return Outcome(self._view(row, full=True), False)
            if table.key_held(row):
                return Outcome(self._view(row, full=True), False, key_held=True)
            self._requeue(row, table.now(), reason)
            return Outcome(self._view(row, full=True), True)

    def _requeue(self, row: Row, at: float, reason: str | None) -> None:
        row.attempt, row.snoozes, row.run_at, row.finished_at = 0, 0, at, None   # before the move: a keyed row waits from here
        self._table.move(row, "ready")
        self._table.record(row.id, at, 0, "requeued", reason)

    def step_reopen(self, job_id: int, name: str) -> JobView:
        """``step_reopen``: forget the step and every later one; the job runs again."""
        return reopened(job_id, name, self._reopen(job_id, name), lambda: self.job_get(job_id))

    def _reopen(self, job_id: int, name: str) -> Outcome:
        table = self._table
        with table.lock:
            row = table.rows.get(job_id)
            steps = table.steps.get(job_id, {})
            target = steps.get(name)
            if row is None or target is None or row.state not in _REOPENABLE:
                return Outcome(None, False)
            if table.key_held(row):
                return Outcome(None, False, key_held=True)
            for step_name in [s.name for s in steps.values() if s.seq >= target.seq]:
                del steps[step_name]
            self._requeue(row, table.now(), f"from step {name}")
            return Outcome(None, True)

    # -- bulk verbs: one bounded batch per call, in id order after ``after_id`` -----------------

    def _batch(self, batch: Batch, states: Sequence[str], at: float) -> list[Row]:
        picked: list[Row] = []
        for row in self._table.rows.values():   # id order, like the statement's "order by id"
            if len(picked) >= batch.limit:
                break
            if (batch.after_id < row.id <= batch.upto_id and row.state in states
                    and _matches(row, batch.where, at)):
                picked.append(row)
        return picked

    def job_requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]:
        """``job_requeue_batch``: per namespace the newest picked row goes back, unless a live
        job holds its key; answers every picked id with its queue when requeued."""
        table = self._table
        with table.lock:
            at = table.now()
            picked = self._batch(batch, _REQUEUABLE, at)
            chosen: dict[Namespace, Row] = {}
            for row in picked:
                if row.namespace not in table.live:
                    if row.namespace not in chosen or chosen[row.namespace].id < row.id:
                        chosen[row.namespace] = row
            for row in sorted(chosen.values(), key=lambda r: r.id):
                self._requeue(row, at, reason)
            done = {row.id for row in chosen.values()}
            return [(row.id, row.queue if row.id in done else None) for row in picked]

    def job_cancel_batch(self, batch: Batch, reason: str) -> list[int]:
        """``job_cancel_batch``: every picked live job is cancelled."""
        table = self._table
        with table.lock:
            at = table.now()
            picked = self._batch(batch, LIVE_STATES, at)
            told: dict[str, list[int]] = {}
            for row in picked:
                if (holder := self._cancel(row, at, reason)) is not None:
                    told.setdefault(holder, []).append(row.id)
            table.tell_cancelled(told)   # one notification per holder, as the statement sends
            return [row.id for row in picked]

    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]:
        """``job_dead_groups``: dead letters by queue, name and the start of their error."""
        # (queue, name, error's start) -> (count, newest id, latest finished_at)
        groups: dict[tuple[str, str, str], tuple[int, int, float | None]] = {}
        with self._table.lock:
            for row in self._table.rows.values():
                if row.state != "dead":
                    continue
                key = (row.queue, row.name, (row.last_error or "")[:ERROR_GROUP_WIDTH])
                n, newest, at = groups.get(key, (0, 0, None))
                if row.finished_at is not None:
                    at = row.finished_at if at is None else max(at, row.finished_at)
                groups[key] = (n + 1, max(newest, row.id), at)
        found = [DeadGroup(queue, name, error, n, newest, at)
                 for (queue, name, error), (n, newest, at) in groups.items()]
        found.sort(key=lambda g: (-g.count, -g.newest_id))
        return found[:limit]

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        """``job_count_matching``: how many, and the newest id among them."""
        table = self._table
        with table.lock:
            at = table.now()
            ids = [row.id for row in table.rows.values() if row.state in states and _matches(row, where, at)]
        return Matching(len(ids), max(ids, default=0))
