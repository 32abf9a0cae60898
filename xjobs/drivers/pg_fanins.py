"""The Postgres driver's ``FanInStore`` (``fanins.py``): statements from ``fanin_find`` on in
``queries.sql``; the settlement side is the trigger ``jobs_fanin_settle`` of migration 12, which
runs inside whichever statement settles a member, so no settling verb needed to change.

A parent's fan-out is one transaction on the steps' pool: ``step_own`` (the parent's row
locked, the claim checked), ``step_begin``, then the fan-in and its children the first time;
its children become visible with the parent's suspension, at commit, so none can settle
before the parent is suspended to be woken.
"""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

from .base import LATEST_MS, Lease
from .fanins import (BatchOpened, ChildRow, Children, FanInOutcome, FanInStore, FanInView, FanOut, Member,
                     NewBatch, batch_key_prefix, child_key_prefix, member_document)
from .pg_database import PgDatabase, first_row
from .refusals import step_kind_mismatch


class PgFanIns(FanInStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def fanin_open(self, lease: Lease, fan: FanOut) -> FanInOutcome:
        sql, now = self._db.sql, self._db.now()
        with self._db.step_connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(sql["step_own"], {"id": lease.job_id, "token": lease.token})
            if cur.fetchone() is None:
                return FanInOutcome(None, fenced=True)
            cur.execute(sql["step_begin"], {
                **now, "id": lease.job_id, "name": fan.name, "kind": "map", "step_state": "waiting",
                "attempt": fan.attempt, "wake_in": None, "event": None, "key": None})
            kind, state, result = first_row(cur)[:3]
            if kind != "map":
                step_kind_mismatch(fan.name, kind)
            if state == "completed":
                return FanInOutcome(None, completed=True, value=result)
            cur.execute(sql["fanin_find"], {"id": lease.job_id, "name": fan.name})
            found = cur.fetchone()
            if found is None:
                fanin_id = self._open(cur, fan, lease.job_id)
                pending = fan.total
            else:
                fanin_id, pending = int(found[0]), int(found[1])
            if pending == 0:
                return FanInOutcome(fanin_id, members=self._members(cur, fanin_id))
            cur.execute(sql["step_suspend"], {**now, "id": lease.job_id, "token": lease.token,
                                              "wake": LATEST_MS, "poll": None})
            return FanInOutcome(fanin_id, suspended=True, fenced=cur.fetchone() is None)

    def _open(self, cur: psycopg.Cursor, fan: FanOut, parent: int | None) -> int:
        sql, now = self._db.sql, self._db.now()
        cur.execute(sql["fanin_create"], {**now, "parent": parent, "name": fan.name, "total": fan.total})
        fanin_id = int(first_row(cur)[0])
        prefix = child_key_prefix(parent, fan.name) if parent is not None else batch_key_prefix(fanin_id)
        self._insert(cur, fan.chunks, fanin_id, prefix, parent, fan.name if parent is not None else None)
        return fanin_id

    def _insert(self, cur: psycopg.Cursor, chunks: Any, fanin_id: int, prefix: str, parent: int | None,
                step: str | None) -> list[int]:
        ids: list[int] = []
        index = 0
        for chunk in chunks:
            docs = [member_document(job, index + i) for i, job in enumerate(chunk)]
            index += len(docs)
            cur.execute(self._db.sql["fanin_enqueue"], {
                **self._db.now(), "rows": orjson.dumps(docs).decode(), "prefix": prefix, "parent": parent,
                "step": step, "fanin": fanin_id})
            ids.extend(int(r[0]) for r in cur.fetchall())
        return ids

    def _members(self, cur: psycopg.Cursor, fanin_id: int) -> tuple[Member, ...]:
        cur.execute(self._db.sql["fanin_members"], {"fanin": fanin_id})
        return tuple(Member(int(i), int(job_id), state, error, result)
                     for i, job_id, state, error, result in cur.fetchall())

    def fanin_complete(self, lease: Lease, name: str, attempt: int, result: bytes) -> bool:
        with self._db.step_connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(self._db.sql["step_own"], {"id": lease.job_id, "token": lease.token})
            if cur.fetchone() is None:
                return False
            cur.execute(self._db.sql["step_complete"], {
                **self._db.now(), "id": lease.job_id, "name": name, "attempt": attempt,
                "result": result.decode(), "timed_out": False})
            return cur.fetchone() is not None

    def batch_open(self, batch: NewBatch) -> BatchOpened:
        sql, now = self._db.sql, self._db.now()
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            callback = batch.callback.document()
            cur.execute(sql["batch_callback"], {**now, "wake": LATEST_MS, "rows": orjson.dumps([callback]).decode()})
            callback_id = int(first_row(cur)[0])
            cur.execute(sql["fanin_create"], {**now, "parent": None, "name": None, "total": batch.total})
            fanin_id = int(first_row(cur)[0])
            cur.execute(sql["fanin_wait_on"], {"fanin": fanin_id, "waiter": callback_id})
            ids = self._insert(cur, batch.chunks, fanin_id, batch_key_prefix(fanin_id), None, None)
            if not ids:
                cur.execute(sql["fanin_wake_empty"], {**now, "fanin": fanin_id, "waiter": callback_id})
                for (queue,) in cur.fetchall():
                    cur.execute(sql["queue_notify"], {"channel": self._db.channel, "queues": [queue]})
        return BatchOpened(fanin_id, callback_id, tuple(ids))

    def fanin_get(self, fanin_id: int) -> FanInView | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["fanin_get"], {"fanin": fanin_id})
            row = cur.fetchone()
        if row is None:
            return None
        (fid, parent, step, waiter, total, pending, completed, dead, cancelled, woken, created, settled) = row
        return FanInView(int(fid), parent, step, waiter, total, pending, completed, dead, cancelled, woken,
                         created, settled)

    def job_parent(self, job_id: int) -> tuple[int, str | None] | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_parent"], {"id": job_id})
            row = cur.fetchone()
        return None if row is None else (int(row[0]), row[1])

    def job_children(self, job_id: int, limit: int) -> Children:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_children"], {"id": job_id, "limit": limit})
            rows = cur.fetchall()
        counts = {state: int(n) for child, state, n, _, _ in rows if child is None}
        first = tuple(ChildRow(int(child), name, state, step) for child, state, _, name, step in rows
                      if child is not None)
        return Children(counts, first)
