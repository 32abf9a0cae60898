"""LISTEN on the queue's notification channel, so enqueue wakes an idle worker at once.

A dedicated autocommit connection (LISTEN state is per session and a pooled connection
would lose it). ``fileno()`` goes into the worker's selector; ``poll()`` consumes what
arrived without blocking and answers the queue names that were notified. A broken
connection is reopened on a later poll; meanwhile the worker's poll timer covers.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from .pg_database import PgDatabase

log = logging.getLogger("xjobs.listen")


class PgListener:
    def __init__(self, db: "PgDatabase", channel: str | None = None) -> None:
        self._db = db
        self._channel = channel or db.channel   # the outbox relay listens on its own channel
        self._conn: psycopg.Connection | None = None
        self._retry_at = 0.0
        self._open()

    def _open(self) -> None:
        try:
            conn = self._db.connect()
            conn.execute(sql.SQL("listen {}").format(sql.Identifier(self._channel)))
            self._conn = conn
        except psycopg.Error as exc:
            log.warning("listen connection failed (%s); relying on the poll interval", exc)
            self._conn = None
            self._retry_at = time.monotonic() + 5.0

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
            queues.add(note.extra.decode() or note.relname.decode())   # the outbox sends no payload
        return queues

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass
