"""Installing and upgrading the Postgres schema: the numbered files of ``migrations/``.

The state of a schema is two rows of ``meta``: ``schema_version``, the number of the last
migration applied (what every release reads, older ones included), and ``compatible_from``,
the oldest code version the schema still serves (``sql.serves_from``). The ledger
``migrations`` says which file was applied when, with its checksum, for ``xjobsd migrate
--status``; versions applied by an xjobs older than the ledger are recorded without either.

Every daemon migrates at boot, so the common case, a schema already at ``SCHEMA_VERSION``, is
ONE read of ``meta`` that takes no lock at all: the DDL would otherwise queue behind any long
application transaction that wrote to ``jobs``, and every claim and ack would then queue
behind the DDL. A schema NEWER than this code is left alone when it says it still serves this
code's version (a rolling deploy: the new release migrated first), with a warning, and refused
otherwise (``X_SCHEMA_TOO_NEW``). An older one is upgraded, or refused when the caller may
not upgrade (``--no-migrate``: ``X_SCHEMA_OUTDATED``).

An upgrade takes a session advisory lock on a dedicated connection and holds it across every
pending migration, so one installer applies the whole plan while the others wait and then
find the schema current. Session rather than per-transaction: the plan is applied by one
process, in order, and said so by it; a connection that dies lets the lock go with it. The
key is the one every earlier release took with ``pg_advisory_xact_lock``, so an old and a new
installer never run at once during a deploy. (A session lock needs a session: migrate over a
direct connection, as ``LISTEN`` already needs, not a transaction-pooling proxy.)

Each migration runs in its own transaction, with the bookkeeping (``meta``, the ledger) in
the same one, so a failure leaves the schema at the last version that committed. Its
statements give up on a table lock after ``lock_timeout`` (``X_MIGRATION_BLOCKED``): a held
table fails the boot with a clear error instead of stalling the fleet behind the DDL.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Sequence

import psycopg

from ..errors import MigrationBlocked, MigrationPrivilegeMissing, SchemaOutdated, SchemaTooNew
from ..logs import event
from .sql import Migration, check_schema_name, migrations, serves_from

log = logging.getLogger("xjobs.migrate")

_MIGRATE_LOCK = 0x786A6F6273  # "xjobs": one installer at a time per database, every release


@dataclass(frozen=True)
class SchemaState:
    version: int                  # meta.schema_version; 0 when nothing is installed
    compatible_from: int | None   # meta.compatible_from; None where no release wrote it


@dataclass(frozen=True)
class LedgerRow:
    version: int
    name: str
    checksum: str | None          # None: applied by an xjobs older than the ledger
    applied_at: float | None      # epoch ms; None as checksum


def read_state(conn: psycopg.Connection, schema: str) -> SchemaState:
    """``meta`` of ``schema`` in one statement (autocommit: outside a transaction, a missing
    table is an answer, not an aborted transaction)."""
    try:
        rows = conn.execute(f"select key, value from {check_schema_name(schema)}.meta"
                            f" where key in ('schema_version', 'compatible_from')").fetchall()
    except psycopg.errors.UndefinedTable:
        return SchemaState(0, None)
    values: dict[str, str] = {key: value for key, value in rows}
    return SchemaState(_number(values.get("schema_version")) or 0, _number(values.get("compatible_from")))


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:   # what every release did with a value it could not read: not installed
        return None


def install(conn: psycopg.Connection, schema: str, lock_timeout_ms: float, *, upgrade: bool = True,
            plan: Sequence[Migration] | None = None) -> list[str]:
    """Bring ``schema`` to the newest migration of ``plan`` (default: the shipped ones) on
    ``conn`` (autocommit, simple protocol: a migration is many statements in one string), and
    answer the labels of the migrations applied. ``upgrade=False`` only checks."""
    plan = migrations() if plan is None else plan
    latest = len(plan)
    state = read_state(conn, schema)
    if state.version >= latest:
        check_serves(state, schema, latest)
        return []
    if not upgrade:
        raise SchemaOutdated(f"{schema!r} is {_at(state)}, this xjobs needs version {latest}, and "
                             f"migrating is off (--no-migrate, XJOBS_MIGRATE, migrate = false): run "
                             f"`xjobsd migrate` first", installed=state.version, code_version=latest)
    conn.execute("select pg_advisory_lock(%s)", (_MIGRATE_LOCK,))
    try:
        state = read_state(conn, schema)   # another installer may have finished meanwhile
        if state.version >= latest:
            check_serves(state, schema, latest)
            return []
        ledger = ledger_exists(conn, schema)
        applied = []
        for migration in plan[state.version:]:
            began = time.monotonic()
            script = migration_script(migration, schema, lock_timeout_ms, plan,
                                      backfill=None if ledger else state.version)
            try:
                with conn.transaction():
                    conn.execute(script)
            except psycopg.errors.LockNotAvailable as exc:
                raise MigrationBlocked(
                    f"migration {migration.label} of schema {schema!r} waited more than "
                    f"{math.ceil(lock_timeout_ms)}ms for a table lock (most likely held by an open "
                    f"application transaction); it was rolled back and the schema stays at version {migration.version - 1}: "
                    f"run `xjobsd migrate` again once that transaction ends") from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise MigrationPrivilegeMissing(
                    f"migration {migration.label} of schema {schema!r} needs a privilege the role "
                    f"{conn.info.user!r} lacks ({exc.diag.message_primary or exc}); it was rolled back and "
                    f"the schema stays at version {migration.version - 1}: run `xjobsd migrate` as the "
                    f"schema's owner (see the production guide's Privileges)") from exc
            ledger = True
            seconds = time.monotonic() - began
            event(log, logging.INFO, "schema.migrated", "schema %s: applied migration %s in %.3fs",
                  schema, migration.label, seconds, schema=schema, version=migration.version,
                  migration=migration.label, seconds=round(seconds, 3))
            applied.append(migration.label)
        return applied
    finally:
        # a broken connection holds nothing any more: its session ended with the lock
        if not conn.broken:
            conn.execute("select pg_advisory_unlock(%s)", (_MIGRATE_LOCK,))


def check_serves(state: SchemaState, schema: str, latest: int) -> None:
    """A schema newer than this code runs it only if it says it still serves its version."""
    if state.version <= latest:
        return
    serves = state.compatible_from if state.compatible_from is not None else state.version
    if serves > latest:
        raise SchemaTooNew(f"{schema!r} is at version {state.version}, which serves the code of "
                           f"version {serves} and later; this xjobs is version {latest}: upgrade it",
                           installed=state.version, code_version=latest)
    event(log, logging.WARNING, "schema.newer", "schema %s is at version %d, newer than this xjobs "
          "(version %d); it still serves version %d and later, so this runs (a rolling deploy?)",
          schema, state.version, latest, serves, schema=schema, version=state.version,
          code_version=latest, compatible_from=serves)


def _at(state: SchemaState) -> str:
    return "not installed" if state.version == 0 else f"at version {state.version}"


# -- the script of one migration: what runs, and what --dry-run prints -------------------------

_LEDGER_DDL = """create schema if not exists {schema};
-- Which migration was applied when (xjobsd migrate --status). A version applied by an xjobs
-- older than this ledger has neither checksum nor time.
create table if not exists {schema}.migrations (
    version    integer primary key,
    name       text        not null,
    checksum   text,
    applied_at timestamptz
);"""


def migration_script(migration: Migration, schema: str, lock_timeout_ms: float,
                     plan: Sequence[Migration], backfill: int | None) -> str:
    """The statements of one migration's transaction: its file, then its bookkeeping.
    ``backfill`` (the installed version) when the ledger does not exist yet: it is created
    first, with rows for the versions an older xjobs applied."""
    schema = check_schema_name(schema)
    parts = [f"-- migration {migration.label}", f"set local lock_timeout = '{math.ceil(lock_timeout_ms)}ms';"]
    if backfill is not None:
        parts.append(_LEDGER_DDL.replace("{schema}", schema))
        if backfill:
            rows = ", ".join(f"({m.version}, '{m.name}')" for m in plan[:backfill])
            parts.append(f"insert into {schema}.migrations (version, name) values {rows}\n"
                         f"    on conflict (version) do nothing;")
    parts.append(migration.sql(schema).strip())
    # the values are numbers and checked names: safe as literals, and the printed script is
    # then exactly what runs
    parts.append(
        f"insert into {schema}.meta (key, value) values ('schema_version', '{migration.version}'),\n"
        f"    ('compatible_from', '{serves_from(plan, migration.version)}')\n"
        f"    on conflict (key) do update set value = excluded.value;\n"
        f"insert into {schema}.migrations (version, name, checksum, applied_at)\n"
        f"    values ({migration.version}, '{migration.name}', '{migration.checksum}', now())\n"
        f"    on conflict (version) do update set name = excluded.name, checksum = excluded.checksum,\n"
        f"        applied_at = excluded.applied_at;")
    return "\n".join(parts) + "\n"


def pending_script(conn: psycopg.Connection, schema: str, lock_timeout_ms: float,
                   plan: Sequence[Migration] | None = None) -> tuple[SchemaState, str]:
    """What ``install`` would run now, as one SQL script (``xjobsd migrate --dry-run``): each
    pending migration between ``begin`` and ``commit``. Empty when nothing is pending."""
    plan = migrations() if plan is None else plan
    state = read_state(conn, schema)
    if state.version >= len(plan):
        return state, ""
    backfill = None if ledger_exists(conn, schema) else state.version
    blocks = []
    for migration in plan[state.version:]:
        blocks.append("begin;\n" + migration_script(migration, schema, lock_timeout_ms, plan, backfill)
                      + "commit;\n")
        backfill = None
    return state, "\n".join(blocks)


# -- reading the ledger ------------------------------------------------------------------------


def ledger_exists(conn: psycopg.Connection, schema: str) -> bool:
    found = conn.execute("select to_regclass(%s) is not null",
                         (f"{check_schema_name(schema)}.migrations",)).fetchone()
    return bool(found and found[0])


def ledger(conn: psycopg.Connection, schema: str) -> list[LedgerRow]:
    """The ledger's rows in order; none where no ledger exists (nothing installed, or only
    by an xjobs older than it)."""
    if not ledger_exists(conn, schema):
        return []
    rows = conn.execute(f"select version, name, checksum, extract(epoch from applied_at) * 1000"
                        f" from {check_schema_name(schema)}.migrations order by version").fetchall()
    return [LedgerRow(v, n, c, None if at is None else float(at)) for v, n, c, at in rows]


@dataclass(frozen=True)
class MigrationStatus:
    """One line of ``xjobsd migrate --status``: a migration this code ships, or one the
    ledger records that it does not (a newer release applied it)."""

    version: int
    name: str
    applied: bool
    applied_at: float | None      # epoch ms, when the ledger knows
    checksum: str | None          # what the ledger recorded; None: not recorded
    file_checksum: str | None     # this code's file; None: a migration this code does not ship

    @property
    def edited(self) -> bool:
        """Applied from a file that differs from the one shipped now."""
        return None not in (self.checksum, self.file_checksum) and self.checksum != self.file_checksum


def status(conn: psycopg.Connection, schema: str,
           plan: Sequence[Migration] | None = None) -> tuple[SchemaState, list[MigrationStatus]]:
    """The schema's state and every migration, applied or pending, read without a lock."""
    plan = migrations() if plan is None else plan
    state = read_state(conn, schema)
    recorded = {row.version: row for row in ledger(conn, schema)}
    lines = []
    for m in plan:
        row = recorded.pop(m.version, None)
        lines.append(MigrationStatus(m.version, m.name, m.version <= state.version,
                                     row.applied_at if row else None, row.checksum if row else None,
                                     m.checksum))
    lines += [MigrationStatus(r.version, r.name, True, r.applied_at, r.checksum, None)
              for r in recorded.values()]
    return state, lines
