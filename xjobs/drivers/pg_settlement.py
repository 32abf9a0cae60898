"""``job_await`` on Postgres: a dedicated autocommit connection LISTENs on the settled channel,
then reads the job (``job_settlement``), and reads it again only when a note names it (or
every ``RECHECK_S``), until it settles or the time runs out. One connection per wait: LISTEN
state is per session, and a pooled connection would keep it for its next borrower."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import set_json_loads

import orjson

from .pg_database import driver_errors
from .refusals import job_not_found
from .settlement import RECHECK_S, Settlement, notified

if TYPE_CHECKING:
    from .pg_database import PgDatabase


def _settlement(job_id: int, row: Any) -> Settlement:
    if row is None:
        raise job_not_found(job_id)
    return Settlement(job_id, row[0], row[1], row[2])


def _left(deadline: float | None) -> float:
    return RECHECK_S if deadline is None else min(RECHECK_S, deadline - time.monotonic())


class PgSettlement:
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def job_await(self, job_id: int, timeout_s: float | None) -> Settlement:
        db = self._db
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with driver_errors(), db.connect() as conn:
            conn.execute(sql.SQL("listen {}").format(sql.Identifier(db.settled_channel)))
            while True:
                # after the LISTEN: a settlement committed before it is in the row
                now = _settlement(job_id, conn.execute(db.sql["job_settlement"], {"id": job_id}).fetchone())
                left = _left(deadline)
                if now.settled or left <= 0:
                    return now
                for note in conn.notifies(timeout=left):
                    if notified(note.payload, job_id):
                        break

    async def job_await_async(self, job_id: int, timeout_s: float | None) -> Settlement:
        db = self._db
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with driver_errors():
            conn = await psycopg.AsyncConnection.connect(db.dsn, **db.listen_options())
            set_json_loads(orjson.loads, conn)
            async with conn:
                await conn.execute(sql.SQL("listen {}").format(sql.Identifier(db.settled_channel)))
                while True:
                    cur = await conn.execute(db.sql["job_settlement"], {"id": job_id})
                    now = _settlement(job_id, await cur.fetchone())
                    left = _left(deadline)
                    if now.settled or left <= 0:
                        return now
                    async for note in conn.notifies(timeout=left):
                        if notified(note.payload, job_id):
                            break
