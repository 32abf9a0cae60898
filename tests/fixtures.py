"""Fixtures for the driver suites: one ManualClock, a memory driver, a real Postgres driver.

Postgres comes from ``XJOBS_TEST_DSN``, else 127.0.0.1:5432 (user and database ``postgres``)
when something answers there, else an embedded ``pgserver`` instance started once per run.
Each test gets its own schema (``t_<hex>``), migrated before and dropped after it, so tests
never see each other's rows and identity columns start at 1.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import psycopg
import pytest

from xjobs.clock import ManualClock
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.postgres import PostgresDriver

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DRIVERS = ["memory", pytest.param("postgres", marks=pytest.mark.postgres)]


def _reachable(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    dsn = os.environ.get("XJOBS_TEST_DSN")
    if dsn:
        yield dsn
        return
    if _reachable(LOCAL_DSN):
        yield LOCAL_DSN
        return
    import pgserver  # only when no server is at hand: it starts a private one

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def new_schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"drop schema if exists {schema} cascade")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name, dropped (with everything in it) after the test."""
    schema = new_schema_name()
    try:
        yield schema
    finally:
        drop_schema(pg_dsn, schema)


# Installed schemas a finished test left as it found them (only emptied): the next test takes
# one instead of installing its own, which costs more than the test itself for most of them.
_SCHEMAS: list[str] = []
_SHAPE: dict[str, list] = {}     # an installed schema's tables and identity columns


def _tables(conn: psycopg.Connection, schema: str) -> list[str]:
    return [r[0] for r in conn.execute("select tablename from pg_tables where schemaname = %s order by 1",
                                       (schema,)).fetchall()]


def _version(conn: psycopg.Connection, schema: str) -> list:
    """The installed schema version: a test that changed it leaves a schema nobody reuses."""
    return conn.execute(f"select value from {schema}.meta where key = 'schema_version'").fetchall()


def _emptied(dsn: str, schema: str) -> bool:
    """Empty a used schema for the next test (identities restarted); False when the test
    changed its shape, so it is dropped instead."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = _tables(conn, schema)
        if tables != _SHAPE.get("installed") or _version(conn, schema) != _SHAPE.get("version"):
            return False
        # delete and setval rather than truncate: truncate swaps every table's files, which
        # costs more than installing the schema afresh
        # meta and the ledger of applied migrations describe the install, not a test's rows
        statements = [f"delete from {schema}.{table}" for table in tables if table not in ("meta", "migrations")]
        statements += [f"select setval(pg_get_serial_sequence('{schema}.{table}', '{column}'), 1, false)"
                       for table, column in _SHAPE["identities"]]
        conn.execute("; ".join(statements))
    return True


@pytest.fixture(scope="session")
def schema_pool(pg_dsn: str) -> Iterator[list[str]]:
    """The free installed schemas; dropped when the session ends."""
    yield _SCHEMAS
    while _SCHEMAS:
        drop_schema(pg_dsn, _SCHEMAS.pop())


@pytest.fixture
def pg_driver(pg_dsn: str, clock: ManualClock, schema_pool: list[str]) -> Iterator[PostgresDriver]:
    """A driver on an installed, empty schema of its own (a reused one when one is free)."""
    schema = schema_pool.pop() if schema_pool else new_schema_name()
    driver = PostgresDriver(pg_dsn, schema=schema, clock=clock, pool_size=2,
                            application_name="xjobs-tests")
    driver.migrate()
    if "installed" not in _SHAPE:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            _SHAPE["installed"] = _tables(conn, schema)
            _SHAPE["version"] = _version(conn, schema)
            _SHAPE["identities"] = [tuple(r) for r in conn.execute(
                "select table_name, column_name from information_schema.columns "
                "where table_schema = %s and is_identity = 'YES' order by 1, 2", (schema,)).fetchall()]
    try:
        yield driver
    finally:
        driver.close()
        if not _emptied(pg_dsn, schema):
            drop_schema(pg_dsn, schema)
        else:
            schema_pool.append(schema)


@pytest.fixture
def memory_driver(clock: ManualClock) -> MemoryDriver:
    return MemoryDriver(clock=clock)


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> object:
    """Every driver in turn, on the shared ``clock``: the conformance suite's subject."""
    return request.getfixturevalue("pg_driver" if request.param == "postgres" else "memory_driver")
