"""The Postgres driver's ``AsyncWrites``: enqueue, stage and send awaited on the application's
``psycopg.AsyncConnection``, in its transaction.

Each verb awaits the plan its synchronous twin runs (``enqueue_plan``, ``stage_plan``,
``send_plan``: ``pg_plan``), on a cursor of the caller's connection, and joins the caller's
transaction the way the synchronous verbs decide it (``joins_as_is``): on a connection with
no transaction begun, the first statement begins the caller's, so a fresh connection's
rollback leaves nothing. What psycopg raises leaves as the seam's errors (``driver_error``).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Sequence

import psycopg
from psycopg.rows import tuple_row

from ..errors import InvalidOption
from .base_async import AsyncCallerConnection, AsyncWrites
from .pg_database import PgDatabase, driver_error, joins_as_is
from .pg_jobs import enqueue_plan
from .pg_outbox import stage_plan
from .pg_plan import run_async
from .pg_steps import check_send_isolation, send_plan
from .records import Enqueued, NewJob
from .records_steps import NewEvent, SentEvent

# jobs per statement of an awaited enqueue: a statement's document is encoded on the event
# loop, about a millisecond for 500 jobs; the loop runs between the statements
ASYNC_CHUNK = 500


def _callers(conn: AsyncCallerConnection) -> psycopg.AsyncConnection[Any]:
    if not isinstance(conn, psycopg.AsyncConnection):
        raise InvalidOption("conn", f"an async verb awaits on a psycopg AsyncConnection, got "
                                    f"{type(conn).__name__}")
    return conn


@contextlib.asynccontextmanager
async def _joined(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """All of a verb's statements in the caller's transaction (``in_callers_transaction``)."""
    if joins_as_is(conn):
        yield
        return
    async with conn.transaction():
        yield


class PgAsyncWrites(AsyncWrites):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    async def job_enqueue_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[Enqueued]:
        """One plan as ``job_enqueue`` runs it; a larger batch ``ASYNC_CHUNK`` jobs at a time,
        all in one savepoint of the caller's transaction (each chunk awaited before the next
        is sent: not pipelined)."""
        callers, db = _callers(conn), self._db
        try:
            if len(jobs) <= ASYNC_CHUNK:
                async with callers.cursor(row_factory=tuple_row) as cur:
                    return await run_async(cur, db.sql, enqueue_plan(db, jobs))
            results: list[Enqueued] = []
            async with _joined(callers), callers.cursor(row_factory=tuple_row) as cur:
                for start in range(0, len(jobs), ASYNC_CHUNK):
                    results += await run_async(cur, db.sql, enqueue_plan(db, jobs[start:start + ASYNC_CHUNK]))
            return results
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    async def outbox_stage_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[int]:
        callers, db = _callers(conn), self._db
        try:
            async with callers.cursor(row_factory=tuple_row) as cur:
                return await run_async(cur, db.sql, stage_plan(db, jobs))
        except psycopg.Error as exc:
            raise driver_error(exc) from exc

    async def event_send_async(self, event: NewEvent, conn: AsyncCallerConnection) -> SentEvent:
        """The lock and the send in the caller's transaction (the lock is held until it ends)."""
        callers, db = _callers(conn), self._db
        check_send_isolation(callers)
        try:
            async with _joined(callers), callers.cursor(row_factory=tuple_row) as cur:
                return await run_async(cur, db.sql, send_plan(db, event))
        except psycopg.Error as exc:
            raise driver_error(exc) from exc
