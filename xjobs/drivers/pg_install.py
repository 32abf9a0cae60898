"""Installing and upgrading the Postgres schema (``schema.sql``).

Every daemon migrates at boot, so the common case, a schema already at ``SCHEMA_VERSION`` (or
a newer one, during a rolling deploy), is one read of ``meta`` that takes no table lock: the
DDL would otherwise queue behind any long application transaction that wrote to ``jobs``,
and every claim and ack would then queue behind the DDL. Only an install or an upgrade runs
the DDL, under an advisory lock (one installer at a time) and a ``lock_timeout``, so a held
table fails the boot with a clear error instead of stalling the fleet.
"""

from __future__ import annotations

import math

import psycopg

from .sql import SCHEMA_VERSION, schema_ddl

_MIGRATE_LOCK = 0x786A6F6273  # "xjobs": one installer at a time per database


def installed_version(conn: psycopg.Connection, schema: str) -> int:
    """``meta.schema_version`` of ``schema``; 0 when nothing (or nothing readable) is installed."""
    # to_regclass instead of reading and catching: inside the installer's transaction an
    # undefined table would abort it
    found = conn.execute("select to_regclass(%s) is not null", (f"{schema}.meta",)).fetchone()
    if found is None or not found[0]:
        return 0
    row = conn.execute(f"select value from {schema}.meta where key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row is not None else 0
    except ValueError:
        return 0


def install(conn: psycopg.Connection, schema: str, lock_timeout_ms: float) -> None:
    """Bring ``schema`` to ``SCHEMA_VERSION`` on ``conn`` (autocommit, simple protocol: the DDL
    is many statements in one string and cannot be prepared)."""
    if installed_version(conn, schema) >= SCHEMA_VERSION:
        return
    with conn.transaction():
        conn.execute("select pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        if installed_version(conn, schema) >= SCHEMA_VERSION:
            return  # another installer finished while this one waited
        # after the advisory lock: waiting for a fellow installer is not a stuck table
        conn.execute("select set_config('lock_timeout', %s, true)", (f"{math.ceil(lock_timeout_ms)}ms",))
        conn.execute(schema_ddl(schema))
