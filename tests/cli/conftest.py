"""``xjobsd``: the command line against the test's own schema (``tests/cli/commands.py``), and
``driver``: a PostgreSQL driver on that schema once ``xjobsd migrate`` installed it."""

from __future__ import annotations

import pytest

from tests.cli.commands import xjobsd_on
from xjobs.drivers.postgres import PostgresDriver


@pytest.fixture
def xjobsd(pg_dsn, pg_schema):
    return xjobsd_on(pg_dsn, pg_schema)


@pytest.fixture
def driver(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    driver = PostgresDriver(pg_dsn, schema=pg_schema, application_name="xjobs-tests")
    yield driver
    driver.close()
