"""The memory driver's ``StepStore`` and ``EventStore``, durable steps and stored events: the statements of ``queries.sql`` from
``step_list`` on, one method each, under the table's one lock (which stands in for the row
lock every step write takes on its job, and for the advisory lock a wait and a send of one
event take turns on).

A send through the object ``job_transaction`` yields is forgotten again if that transaction
rolls back, as a rolled-back insert would be; there is no other transaction in memory.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import InvalidOption
from .base import (LATEST_MS, CallerConnection, EventStore, Lease, NewEvent, SentEvent, StepLog,
                   StepOutcome, StepRecord, StepResult, StepSleep, StepStore, StepWait)
from .jsonb import as_stored
from .memory_jobs import MemoryTransaction
from .memory_table import MemoryTable, Row, StepRow, plus, ts
from .refusals import step_kind_mismatch


def _record(step: StepRow) -> StepRecord:
    return StepRecord(name=step.name, kind=step.kind, state=step.state, seq=step.seq,
                      attempt=step.attempt,
                      result=None if step.result is None else orjson.loads(step.result),
                      started_at=step.started_at, finished_at=step.finished_at,
                      wake_at=step.wake_at, event=step.event, event_key=step.event_key,
                      timed_out=step.timed_out)


class MemorySteps(StepStore, EventStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def step_list(self, job_id: int, for_run: bool = True) -> StepLog:
        """``step_list`` (there is one lock, whoever reads)."""
        table = self._table
        with table.lock:
            steps = sorted(table.steps.get(job_id, {}).values(), key=lambda s: s.seq)
            return StepLog(now_ms=table.now(), steps=tuple(_record(s) for s in steps))

    def step_put(self, lease: Lease, step: StepResult) -> bool:
        """``step_put``: fenced on the claim; a name already recorded writes nothing."""
        table = self._table
        with table.lock:
            if table.held(lease.job_id, lease.token) is None:
                return False
            steps = table.steps.setdefault(lease.job_id, {})
            seq = table.take_seq()    # like the identity column: the attempted insert consumes one
            if step.name in steps:
                return False
            at = table.now()
            steps[step.name] = StepRow(step.name, "run", "completed", seq, step.attempt,
                                       ts(at - ts(step.duration_ms)), as_stored(step.result), at)
            return True

    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome:
        """``step_own``, ``step_begin``, then ``step_complete`` or ``step_suspend``."""
        table = self._table
        with table.lock:
            row = table.held(lease.job_id, lease.token)
            if row is None:
                return StepOutcome(False, fenced=True)
            at = table.now()
            step = self._begin(row, sleep.name, "sleep", "sleeping", sleep.attempt, at,
                               sleep.duration_ms, None, None)
            if step.kind != "sleep":
                step_kind_mismatch(sleep.name, step.kind)
            if step.state == "completed" or (step.wake_at is not None and step.wake_at <= at):
                if step.state != "completed":
                    self._complete(step, sleep.attempt, at, None, False)
                return StepOutcome(True, None, step.wake_at)
            return self._suspend(row, at, step.wake_at if step.wake_at is not None else LATEST_MS)

    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome:
        """``event_lock``, ``step_own``, ``step_begin``, ``event_first``, then ``step_complete``
        or ``step_suspend``."""
        table = self._table
        with table.lock:
            row = table.held(lease.job_id, lease.token)
            if row is None:
                return StepOutcome(False, fenced=True)
            at = table.now()
            step = self._begin(row, wait.name, "wait", "waiting", wait.attempt, at, wait.timeout_ms,
                               wait.event, wait.key)
            if step.kind != "wait" or (step.event, step.event_key) != (wait.event, wait.key):
                step_kind_mismatch(wait.name, step.kind if step.kind != "wait"
                          else f"a wait for {step.event!r} key {step.event_key!r}")
            if step.state == "completed":
                return StepOutcome(True, _decoded(step.result), step.wake_at, step.timed_out)
            payload = table.first_event(wait.event, wait.key, row.created_at)
            if payload is not None:
                self._complete(step, wait.attempt, at, payload, False)
                return StepOutcome(True, orjson.loads(payload), step.wake_at)
            if step.wake_at is not None and step.wake_at <= at:
                self._complete(step, wait.attempt, at, None, True)
                return StepOutcome(True, None, step.wake_at, timed_out=True)
            wake = LATEST_MS if step.wake_at is None else step.wake_at
            if wait.poll_ms is not None:
                wake = min(wake, plus(at, wait.poll_ms))
            return self._suspend(row, at, wake)

    def _begin(self, row: Row, name: str, kind: str, state: str, attempt: int, at: float,
               wake_in: float | None, event: str | None, key: str | None) -> StepRow:
        steps = self._table.steps.setdefault(row.id, {})
        step = steps.get(name)
        seq = self._table.take_seq()    # the insert is attempted every time, found or not
        if step is None:
            step = steps[name] = StepRow(name, kind, state, seq, attempt, at,
                                         wake_at=None if wake_in is None else plus(at, wake_in),
                                         event=event, event_key=key)
        return step

    @staticmethod
    def _complete(step: StepRow, attempt: int, at: float, result: bytes | None, timed_out: bool) -> None:
        step.state, step.result, step.timed_out = "completed", result, timed_out
        step.finished_at, step.attempt = at, attempt

    def _suspend(self, row: Row, at: float, wake_at: float) -> StepOutcome:
        """``step_suspend``: suspended until ``wake_at``, the attempt not charged, no error."""
        table = self._table
        table.move(row, "suspended")
        row.attempt = max(row.attempt - 1, 0)
        row.run_at = ts(wake_at)
        row.lease_token = row.lease_expires_at = None
        table.record(row.id, at, row.attempt + 1, "suspended", None)
        return StepOutcome(False, wake_at=row.run_at)

    # -- events -------------------------------------------------------------------------------

    def event_send(self, event: NewEvent, conn: CallerConnection | None = None) -> SentEvent:
        """``event_lock`` and ``event_send``: store it, wake every job suspended on it. Through a
        transaction of this driver, both are undone if it rolls back."""
        table = self._table
        if conn is not None and not (isinstance(conn, MemoryTransaction) and conn.table is table):
            raise InvalidOption("conn", "the memory driver joins only a transaction from its own job_transaction()")
        with table.lock:
            at = table.now()
            event_id = table.take_event_id()
            table.events[event_id] = (event.name, event.key, as_stored(event.payload), at)
            table.events_by_key.setdefault((event.name, event.key), []).append(event_id)
            woken = 0
            payload = table.events[event_id][2]
            for row, suspended in table.suspended_waits():
                waiting = [s for s in suspended if s.event == event.name and s.event_key == event.key]
                if not waiting:
                    continue
                if conn is not None:
                    conn.woken.append((row.id, row.run_at, [s.name for s in waiting]))
                for step in waiting:   # delivered: recorded here, whatever happens to the event
                    self._complete(step, row.attempt + 1, at, payload, False)
                row.run_at = at   # before the move, which a waiting keyed member undoes
                table.move(row, "ready")
                woken += 1
            if conn is not None:
                conn.events.append(event_id)
        return SentEvent(event_id, woken)

    def event_prune(self, retention_ms: float, limit: int) -> int:
        """``event_prune``: events sent before now minus the retention, oldest first."""
        table = self._table
        with table.lock:
            before = ts(table.now() - ts(retention_ms))
            doomed = sorted((sent, event_id) for event_id, (_, _, _, sent) in table.events.items()
                            if sent < before)[:limit]
            table.forget_events([event_id for _, event_id in doomed])
            return len(doomed)


def _decoded(result: bytes | None) -> Any:
    return None if result is None else orjson.loads(result)
