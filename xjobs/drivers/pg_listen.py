"""LISTEN on the queue's notification channel, so enqueue wakes an idle worker at once; and,
for a worker, on the cancel channel, so an operator's cancel reaches its running body at once.

A dedicated autocommit connection (LISTEN state is per session and a pooled connection
would lose it). ``fileno()`` goes into the worker's selector; ``poll()`` consumes what
arrived without blocking and answers the queue names that were notified. A broken
connection is reopened on a later poll; meanwhile the worker's poll timer covers.

A cancel notification (``job_cancel``, ``job_cancel_batch`` in ``queries.sql``) is a JSON
object naming the holder of the running jobs and, when they fit, the jobs
(``{"holder": "worker:...", "ids": [17]}``). Every worker of the database hears every one:
one whose holder is not this listener's costs a parse and nothing else. What names this
holder is kept for ``cancels()``; a note naming no job, or a reopened connection (whatever
was told meanwhile was lost), asks the worker to check every run it holds.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import orjson
import psycopg
from psycopg import sql

from .records import Cancels

if TYPE_CHECKING:
    from .pg_database import PgDatabase

log = logging.getLogger("xjobs.listen")


class PgListener:
    def __init__(self, db: "PgDatabase", channel: str | None = None, holder: str | None = None) -> None:
        """``channel``: the outbox relay listens on its own; ``holder``: the worker whose
        running jobs' cancels this listener also hears."""
        self._db = db
        self._channel = channel or db.channel
        self._holder = holder
        self._cancel_channel = db.cancel_channel if holder is not None else None
        self._conn: psycopg.Connection | None = None
        self._retry_at = 0.0
        self._ids: set[int] = set()
        self._every = False
        self._opened = False
        self._open()

    def _open(self) -> None:
        try:
            conn = self._db.connect()
            for channel in filter(None, (self._channel, self._cancel_channel)):
                conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
            self._conn = conn
        except psycopg.Error as exc:
            log.warning("listen connection failed (%s); relying on the poll interval", exc)
            self._conn = None
            self._retry_at = time.monotonic() + 5.0
            return
        # a cancel told while no connection listened was heard by nobody
        self._every = self._every or (self._opened and self._holder is not None)
        self._opened = True

    def fileno(self) -> int | None:
        return self._conn.fileno() if self._conn is not None else None

    def poll(self) -> set[str]:
        if self._conn is None:
            if time.monotonic() >= self._retry_at:
                self._open()
            return set()
        pgconn = self._conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as exc:
            log.warning("listen connection lost (%s); reopening", exc)
            self.close()
            self._retry_at = time.monotonic() + 1.0
            return set()
        queues: set[str] = set()
        while (note := pgconn.notifies()) is not None:
            channel = note.relname.decode()
            if channel == self._cancel_channel:
                self._hear(note.extra)
            else:
                queues.add(note.extra.decode() or channel)   # the outbox sends no payload
        return queues

    def _hear(self, payload: bytes) -> None:
        try:
            told = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if not isinstance(told, dict) or told.get("holder") != self._holder:
            return
        ids = told.get("ids")
        if isinstance(ids, list) and all(type(i) is int for i in ids):
            self._ids.update(ids)
        else:
            self._every = True

    def cancels(self) -> Cancels:
        """The cancels heard for this listener's holder since the last call."""
        heard = Cancels(frozenset(self._ids), self._every)
        self._ids, self._every = set(), False
        return heard

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass
