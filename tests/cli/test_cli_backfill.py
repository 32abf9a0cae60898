"""``xjobsd backfill ls|run`` as an operator types it: the declared backfills against the ledger,
the gate per name (``--all`` goes on past a refusal, the exit code says one was refused), the
ready-made migration preconditions read from their tools' tables."""

from __future__ import annotations

import psycopg
import pytest

from tests.cli.commands import as_json

pytestmark = pytest.mark.postgres

APP = "tests.apps.backfill_cli_app"


@pytest.fixture
def installed(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    return pg_schema


def test_run_all_gates_each_name_alone_and_says_one_was_refused(xjobsd, installed, pg_dsn):
    listed = as_json(xjobsd("backfill", "ls", "--app", APP, "--json"))
    assert listed["ledger"] is True and listed["environment"] is None
    assert {r["name"]: r["status"] for r in listed["backfills"]} == {
        "django_wait": "pending", "free": "pending", "migrated": "pending"}
    proc = xjobsd("backfill", "run", "--all", "--app", APP, expect=2)
    assert proc.stdout.startswith("backfill free: enqueued job ")
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("xjobsd: X_BACKFILL_REQUIRES: ") for line in lines)
    assert "django migration users.0042_email: its table is missing" in lines[0]
    assert "alembic revision abc123: its table is missing" in lines[1]
    again = xjobsd("backfill", "run", "free", "--app", APP)
    assert "a pass is already live" in again.stdout          # one live pass per name

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create table {installed}.alembic_version (version_num text primary key)")
        conn.execute(f"insert into {installed}.alembic_version values ('0ff1ce')")
        conn.execute(f"create table {installed}.django_migrations (app text, name text)")
        conn.execute(f"insert into {installed}.django_migrations values ('users', '0042_email')")
    wrong = xjobsd("backfill", "run", "migrated", "--app", APP, expect=2)
    assert "alembic is at 0ff1ce, not abc123" in wrong.stderr
    [enqueued] = as_json(xjobsd("backfill", "run", "django_wait", "--app", APP, "--json"))
    assert enqueued["refused"] is None and enqueued["job_id"] > 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"update {installed}.alembic_version set version_num = 'abc123'")
    assert "enqueued job" in xjobsd("backfill", "run", "migrated", "--app", APP).stdout
    table = xjobsd("backfill", "ls", "--app", APP).stdout
    assert table.splitlines()[0].split() == ["NAME", "STATUS", "RUNS", "LAST", "RUN", "STATE", "ROWS", "STARTED",
                                             "COMPLETED"]
    assert "3 pending in environment (none set)" in table


@pytest.mark.parametrize("args, code", [
    (["run"], "X_INVALID_OPTION"),
    (["run", "free", "--all"], "X_INVALID_OPTION"),
    (["run", "nope"], "X_JOB_UNKNOWN"),
])
def test_a_run_that_names_no_backfill_is_refused(xjobsd, installed, args, code):
    proc = xjobsd("backfill", *args, "--app", APP, expect=2)
    assert proc.stderr.startswith(f"xjobsd: {code}: ")
