"""``xjobsd``: the command line against the test's own schema (``tests/cli/commands.py``)."""

from __future__ import annotations

import pytest

from tests.cli.commands import xjobsd_on


@pytest.fixture
def xjobsd(pg_dsn, pg_schema):
    return xjobsd_on(pg_dsn, pg_schema)
