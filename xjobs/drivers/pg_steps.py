"""The Postgres driver's ``StepStore`` and ``EventStore``: durable steps and stored events
(``ctx.step``, ``xjobs.send_event``).

Statements are in ``queries.sql`` (from ``step_list`` on). Every write a run makes is fenced
on its claim: ``step_put`` locks the job row ``for share`` in the statement that writes, and
a sleep's or a wait's transaction starts with ``step_own`` (``for update``), so no write of a
run lands after a cancel, a rescue or a hand-back took its job away.

Step statements run on the steps' pool (``PgDatabase.step_connection``): a few connections
every run of the process shares, whatever its slot count, and never the pool of the claim,
ack and renewal: a thousand bodies recording steps at once must not starve the renewals that
keep their own leases alive. A ``step.run``'s result is written with the others that arrive
while the last batch is being written (``pg_step_writes``), one connection for them all.

A wait and a send of one (event, key) take turns on a transaction-scoped advisory lock
(``event_lock``), always before any job row is locked: either the wait sees the event and
completes, or it suspends before the send looks for suspended waiters and is woken by it.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

from ..errors import InvalidOption
from .base import (LATEST_MS, CallerConnection, EventStore, Lease, NewEvent, SentEvent, StepLog,
                   StepOutcome, StepResult, StepSleep, StepStore, StepWait)
from .pg_database import PgDatabase, callers_connection, first_row, in_callers_transaction
from .pg_plan import Plan, run_on
from .pg_step_writes import PgStepWrites, read_log
from .refusals import step_kind_mismatch


def send_plan(db: PgDatabase, event: NewEvent) -> Plan[SentEvent]:
    """``event_lock``, then ``event_send`` (``pg_plan``): the stored event's id and how many
    suspended jobs it woke."""
    params = {**db.now(), "name": event.name, "key": event.key, "payload": event.payload.decode(),
              "channel": db.channel}
    yield "event_lock", params
    sent = yield "event_send", params
    return SentEvent(int(sent[0][0]), int(sent[0][1]))


def check_send_isolation(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """A send joins a read committed transaction only: a snapshot taken earlier would not see
    a waiter that suspended after the caller's transaction began, and leave it waiting."""
    level = getattr(conn, "isolation_level", None)
    if level is not None and level != psycopg.IsolationLevel.READ_COMMITTED:
        raise InvalidOption("conn", f"send_event joins a read committed transaction only, "
                                    f"got {level.name.lower().replace('_', ' ')}")


class PgSteps(StepStore, EventStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db
        self._writes = PgStepWrites(db)

    def step_list(self, job_id: int, for_run: bool = True) -> StepLog:
        """A run's read is coalesced with the other runs' step statements of this process
        (``pg_step_writes``); an operator's (``job_get``) goes to the verbs' pool."""
        if for_run:
            return self._writes.read(job_id)
        with self._db.cursor() as cur:
            return read_log(cur, self._db, job_id)

    def step_put(self, lease: Lease, step: StepResult) -> bool:
        """Coalesced with the other runs' results of this process (``pg_step_writes``)."""
        return self._writes.put(lease, step)

    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome:
        with self._db.step_connection() as conn, conn.transaction(), conn.cursor() as cur:
            if not self._own(cur, lease):
                return StepOutcome(False, fenced=True)
            state = self._begin(cur, lease, sleep.name, "sleep", "sleeping", sleep.attempt,
                                sleep.duration_ms, None, None)
            if state[0] != "sleep":
                step_kind_mismatch(sleep.name, state[0])
            if state[1] == "completed" or state[4]:
                if state[1] != "completed":
                    self._complete(cur, lease, sleep.name, sleep.attempt, None, False)
                return StepOutcome(True, None, state[3])
            return self._suspend(cur, lease, state[3])

    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome:
        with self._db.step_connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(self._db.sql["event_lock"], {"name": wait.event, "key": wait.key})
            if not self._own(cur, lease):
                return StepOutcome(False, fenced=True)
            state = self._begin(cur, lease, wait.name, "wait", "waiting", wait.attempt,
                                wait.timeout_ms, wait.event, wait.key)
            kind, status, result, wake_at, due, event, key, timed_out = state
            if kind != "wait" or (event, key) != (wait.event, wait.key):
                step_kind_mismatch(wait.name, kind if kind != "wait" else f"a wait for {event!r} key {key!r}")
            if status == "completed":
                return StepOutcome(True, result, wake_at, timed_out)
            cur.execute(self._db.sql["event_first"], {"name": wait.event, "key": wait.key,
                                                      "id": lease.job_id})
            found = cur.fetchone()
            if found is not None:
                self._complete(cur, lease, wait.name, wait.attempt, orjson.dumps(found[1]), False)
                return StepOutcome(True, found[1], wake_at)
            if due:
                self._complete(cur, lease, wait.name, wait.attempt, None, True)
                return StepOutcome(True, None, wake_at, timed_out=True)
            return self._suspend(cur, lease, LATEST_MS if wake_at is None else wake_at, wait.poll_ms)

    def _own(self, cur: psycopg.Cursor, lease: Lease) -> bool:
        cur.execute(self._db.sql["step_own"], {"id": lease.job_id, "token": lease.token})
        return cur.fetchone() is not None

    def _begin(self, cur: psycopg.Cursor, lease: Lease, name: str, kind: str, state: str, attempt: int,
               wake_in: float | None, event: str | None, key: str | None) -> tuple[Any, ...]:
        cur.execute(self._db.sql["step_begin"], {
            **self._db.now(), "id": lease.job_id, "name": name, "kind": kind, "step_state": state,
            "attempt": attempt, "wake_in": wake_in, "event": event, "key": key})
        return first_row(cur)

    def _complete(self, cur: psycopg.Cursor, lease: Lease, name: str, attempt: int,
                  result: bytes | None, timed_out: bool) -> None:
        cur.execute(self._db.sql["step_complete"], {
            **self._db.now(), "id": lease.job_id, "name": name, "attempt": attempt,
            "result": None if result is None else result.decode(), "timed_out": timed_out})

    def _suspend(self, cur: psycopg.Cursor, lease: Lease, wake_at: float,
              poll_ms: float | None = None) -> StepOutcome:
        cur.execute(self._db.sql["step_suspend"], {**self._db.now(), "id": lease.job_id,
                                                "token": lease.token, "wake": wake_at, "poll": poll_ms})
        row = cur.fetchone()
        return StepOutcome(False, wake_at=wake_at if row is None else row[0], fenced=row is None)

    # -- events -------------------------------------------------------------------------------

    def event_send(self, event: NewEvent, conn: CallerConnection | None = None) -> SentEvent:
        if conn is None:
            with self._db.connection() as own:
                return self._send(own, event)
        callers = callers_connection(conn)
        check_send_isolation(callers)
        return self._send(callers, event)

    def _send(self, conn: psycopg.Connection[Any], event: NewEvent) -> SentEvent:
        # the lock is transaction-scoped: it must be held until the send's rows commit, with
        # the caller's transaction (or with one of the send's own on an autocommit connection)
        with in_callers_transaction(conn), self._db.cursor(conn) as cur:
            return run_on(cur, self._db.sql, send_plan(self._db, event))

    def event_prune(self, retention_ms: float, limit: int) -> int:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["event_prune"], {**self._db.now(), "retention": retention_ms,
                                                      "limit": limit})
            return int(first_row(cur)[0])
