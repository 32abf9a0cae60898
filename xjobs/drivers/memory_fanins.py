"""The memory driver's ``FanInStore`` (``fanins.py``), and what the trigger ``jobs_fanin_settle``
does, run by ``MemoryTable.move`` whenever a member leaves the live states or comes back to
them (``settle``): its fan-in's count, the wake at 0, and the cascade of a cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from .base import LATEST_MS, LIVE_STATES, Lease
from .fanins import (BatchOpened, ChildRow, Children, FanInOutcome, FanInStore, FanInView, FanOut, Member,
                     NewBatch, batch_key_prefix, child_key_prefix)
from .jsonb import as_stored
from .memory_table import MemoryTable, Row, StepRow, plus, ts
from .records import NewJob
from .refusals import step_kind_mismatch


@dataclass(slots=True)
class FanInRow:
    id: int
    parent_id: int | None
    step: str | None
    waiter_id: int | None
    total: int
    pending: int
    created_at: float
    members: list[int] = field(default_factory=list)     # jobs_fanin_idx: ids in input order
    counts: dict[str, int] = field(default_factory=lambda: {"completed": 0, "dead": 0, "cancelled": 0})
    settled_at: float | None = None
    woken: int = 0


class MemoryFanIns(FanInStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._fanins: dict[int, FanInRow] = {}
        self._by_step: dict[tuple[int, str], int] = {}
        self._by_waiter: dict[int, list[int]] = {}       # what job_prune deletes with a job
        self._children: dict[int, list[int]] = {}        # jobs_parent_idx
        self._next = 1
        table.settle_hook = self.settle
        table.forget_hook = self.forget

    def forget(self, job_id: int) -> None:
        """``job_prune``: the fan-ins a pruned job would have been woken by go with it."""
        for fanin_id in self._by_waiter.pop(job_id, ()):
            fan = self._fanins.pop(fanin_id)
            if fan.parent_id is not None and fan.step is not None:
                self._by_step.pop((fan.parent_id, fan.step), None)

    # -- the trigger ----------------------------------------------------------------------------

    def settle(self, row: Row, was: str) -> None:
        table, at = self._table, self._table.now()
        fan = self._fanins.get(row.fanin_id) if row.fanin_id is not None else None
        if fan is not None:
            live_now = row.state in LIVE_STATES
            fan.pending += 1 if live_now else -1
            for state in fan.counts:
                fan.counts[state] += (row.state == state) - (was == state)
            fan.settled_at = at if fan.pending == 0 and not live_now else None
            waiter = table.rows.get(fan.waiter_id) if fan.waiter_id is not None else None
            if fan.pending == 0 and waiter is not None and waiter.state == "suspended":
                self._wake(fan, waiter, at)
        if row.state == "cancelled":
            for child_id in self._children.get(row.id, ()):
                child = table.rows[child_id]
                if child.state not in LIVE_STATES:
                    continue
                running, holder = child.state == "running", child.claimed_by
                reason = f"cancelled with its parent job {row.id}"
                table.move(child, "cancelled")
                child.finished_at, child.last_error = at, reason
                child.lease_token = child.lease_expires_at = None
                table.record(child.id, at, child.attempt, "cancelled", reason)
                if running and holder is not None:
                    table.tell_cancelled({holder: [child.id]})

    def _wake(self, fan: FanInRow, waiter: Row, at: float) -> None:
        table = self._table
        table.move(waiter, "ready")
        waiter.run_at = at
        fan.woken += 1
        if fan.parent_id is None:
            payload = orjson.loads(waiter.payload)
            ids = {state: [m for m in sorted(fan.members) if table.rows[m].state == state] for state in fan.counts}
            payload.update({"batch_id": fan.id, **fan.counts, **{f"{s}_ids": v for s, v in ids.items()}})
            waiter.payload = as_stored(orjson.dumps(payload))

    # -- the verbs ------------------------------------------------------------------------------

    def fanin_open(self, lease: Lease, fan: FanOut) -> FanInOutcome:
        table = self._table
        with table.lock:
            row = table.held(lease.job_id, lease.token)
            if row is None:
                return FanInOutcome(None, fenced=True)
            at = table.now()
            steps = table.steps.setdefault(row.id, {})
            step = steps.get(fan.name)
            seq = table.take_seq()
            if step is None:
                step = steps[fan.name] = StepRow(fan.name, "map", "waiting", seq, fan.attempt, at)
            if step.kind != "map":
                step_kind_mismatch(fan.name, step.kind)
            if step.state == "completed":
                return FanInOutcome(None, completed=True,
                                    value=None if step.result is None else orjson.loads(step.result))
            fanin_id = self._by_step.get((row.id, fan.name))
            if fanin_id is None:
                fanin_id = self._open(row.id, fan.name, row.id, fan.total, at).id
                self._insert(fan.chunks, self._fanins[fanin_id], child_key_prefix(row.id, fan.name), at)
            record = self._fanins[fanin_id]
            if record.pending == 0:
                return FanInOutcome(fanin_id, members=self._members(record))
            table.move(row, "suspended")
            row.attempt = max(row.attempt - 1, 0)
            row.run_at = ts(LATEST_MS)
            row.lease_token = row.lease_expires_at = None
            table.record(row.id, at, row.attempt + 1, "suspended", None)
            return FanInOutcome(fanin_id, suspended=True)

    def _open(self, parent: int | None, step: str | None, waiter: int | None, total: int, at: float) -> FanInRow:
        fan = FanInRow(self._next, parent, step, waiter, total, total, at)
        self._next += 1
        self._fanins[fan.id] = fan
        if waiter is not None:
            self._by_waiter.setdefault(waiter, []).append(fan.id)
        if parent is not None and step is not None:
            self._by_step[(parent, step)] = fan.id
        return fan

    def _insert(self, chunks: Any, fan: FanInRow, prefix: str, at: float) -> list[int]:
        table, index, ids = self._table, 0, []
        for chunk in chunks:
            for job in chunk:
                row = _row(table.take_id(), job, f"{prefix}{index}", at, "ready")
                row.parent_id, row.fanin_id, row.fanin_index = fan.parent_id, fan.id, index
                row.parent_step = fan.step
                table.insert(row)
                fan.members.append(row.id)
                if fan.parent_id is not None:
                    self._children.setdefault(fan.parent_id, []).append(row.id)
                ids.append(row.id)
                index += 1
        return ids

    def _members(self, fan: FanInRow) -> tuple[Member, ...]:
        rows = [self._table.rows[m] for m in fan.members if m in self._table.rows]
        return tuple(Member(r.fanin_index or 0, r.id, r.state, r.last_error, _result(r)) for r in rows)

    def fanin_complete(self, lease: Lease, name: str, attempt: int, result: bytes) -> bool:
        table = self._table
        with table.lock:
            if table.held(lease.job_id, lease.token) is None:
                return False
            step = table.steps.get(lease.job_id, {}).get(name)
            if step is None:
                return False
            step.state, step.result, step.attempt = "completed", as_stored(result), attempt
            step.finished_at = table.now()
            return True

    def batch_open(self, batch: NewBatch) -> BatchOpened:
        table = self._table
        with table.lock:
            at = table.now()
            callback = _row(table.take_id(), batch.callback, batch.callback.idempotency_key, at, "suspended")
            callback.run_at = ts(LATEST_MS)
            table.insert(callback)
            fan = self._open(None, None, callback.id, batch.total, at)
            ids = self._insert(batch.chunks, fan, batch_key_prefix(fan.id), at)
            if not ids:
                fan.settled_at = at
                self._wake(fan, callback, at)
            return BatchOpened(fan.id, callback.id, tuple(ids))

    def fanin_get(self, fanin_id: int) -> FanInView | None:
        with self._table.lock:
            f = self._fanins.get(fanin_id)
            if f is None:
                return None
            return FanInView(f.id, f.parent_id, f.step, f.waiter_id, f.total, f.pending, f.counts["completed"],
                             f.counts["dead"], f.counts["cancelled"], f.woken, f.created_at, f.settled_at)

    def job_parent(self, job_id: int) -> tuple[int, str | None] | None:
        with self._table.lock:
            row = self._table.rows.get(job_id)
            return None if row is None or row.parent_id is None else (row.parent_id, row.parent_step)

    def job_children(self, job_id: int, limit: int) -> Children:
        table = self._table
        with table.lock:
            rows = [table.rows[c] for c in self._children.get(job_id, ()) if c in table.rows]
            counts: dict[str, int] = {}
            for r in rows:
                counts[r.state] = counts.get(r.state, 0) + 1
            rows.sort(key=lambda r: r.id)
            first = tuple(ChildRow(r.id, r.name, r.state, r.parent_step) for r in rows[:limit])
            return Children(counts, first)


def _row(job_id: int, job: NewJob, key: str, at: float, state: str) -> Row:
    return Row(id=job_id, name=job.name, queue=job.queue, state=state, payload=as_stored(job.payload),
               tenant=job.tenant, enqueued_by=job.enqueued_by, idempotency_key=key, priority=job.priority,
               max_attempts=job.max_attempts,
               run_at=plus(at, job.delay_ms) if job.run_at_ms is None else ts(job.run_at_ms),
               created_at=at, traceparent=job.traceparent, concurrency_key=job.concurrency_key,
               key_cap=job.key_cap, key_hold=job.key_hold, fair_key=job.fair_key,
               rate_key=job.rate_key)


def _result(row: Row) -> Any:
    """A member's stored return value (None: it returned None, or did not complete)."""
    return None if row.result is None else orjson.loads(row.result)
