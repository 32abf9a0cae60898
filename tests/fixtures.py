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

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="delete")
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


@pytest.fixture
def pg_driver(pg_dsn: str, pg_schema: str, clock: ManualClock) -> Iterator[PostgresDriver]:
    driver = PostgresDriver(pg_dsn, schema=pg_schema, clock=clock, pool_size=2,
                            application_name="xjobs-tests")
    driver.migrate()
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def memory_driver(clock: ManualClock) -> MemoryDriver:
    return MemoryDriver(clock=clock)


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> object:
    """Every driver in turn, on the shared ``clock``: the conformance suite's subject."""
    return request.getfixturevalue("pg_driver" if request.param == "postgres" else "memory_driver")
