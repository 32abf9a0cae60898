"""The schema as numbered migrations: an upgrade from every earlier release equals a fresh
install, a change to the schema is always a new migration, and ``xjobsd migrate`` (apply,
``--status``, ``--dry-run``) says what it does. Real PostgreSQL throughout.

The releases are the schema files xjobs shipped before migrations (``tests/schema_history``),
each installed as its own code installed it; see ``tests/migration_fixtures.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import orjson
import psycopg
import pytest

from tests.fixtures import drop_schema, new_schema_name
from tests.migration_fixtures import (HISTORY, SNAPSHOT, Release, catalog, catalog_diff, install_release,
                                      recorded_checksums)
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.sql import SCHEMA_VERSION, Migration, check_sequence, migrations, serves_from
from xjobs.drivers.base import Claim

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def fresh_catalog(pg_dsn: str) -> dict[str, list]:
    """What a fresh install produces today."""
    schema = new_schema_name()
    driver = PostgresDriver(pg_dsn, schema=schema)
    try:
        assert driver.migrate() == [m.label for m in migrations()]
        with psycopg.connect(pg_dsn) as conn:
            return catalog(conn, schema)
    finally:
        driver.close()
        drop_schema(pg_dsn, schema)


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(pg_dsn, name)


# -- an upgrade from each release --------------------------------------------------------------


def _write_rows(conn: psycopg.Connection, schema: str, release: Release) -> None:
    """A few rows of each table the release had, as its code would have left them."""
    token = "'00000000-0000-0000-0000-000000000007'::uuid" if release.commit == "a3592a1" else "7"
    conn.execute(
        f"insert into {schema}.jobs (name, queue, state, payload, tenant, idempotency_key, attempt,"
        f" max_attempts, run_at, created_at, finished_at, lease_token, claimed_by, lease_expires_at) values"
        f" ('report', 'old', 'ready', '[1]', null, 'r', 0, 3, now() - interval '1 minute',"
        f"  now() - interval '1 hour', null, null, null, null),"
        f" ('report', 'old', 'completed', '[2]', 'acme', 'd', 1, 3, now() - interval '2 hours',"
        f"  now() - interval '2 hours', now() - interval '1 hour', null, null, null),"
        f" ('report', 'old', 'running', '[3]', null, 'x', 1, 3, now() - interval '1 hour',"
        f"  now() - interval '1 hour', null, {token}, 'w-old', now() + interval '1 hour')")
    conn.execute(f"insert into {schema}.job_history (job_id, at, attempt, outcome, error)"
                 f" values (2, now() - interval '90 minutes', 1, 'retried', 'boom')")
    if release.version >= 2:
        conn.execute(f"insert into {schema}.queues (name, paused, changed_at, changed_by)"
                     f" values ('other', true, now(), 'ops')")
    if release.version >= 3:
        conn.execute(f"insert into {schema}.outbox (staged_at, job) values (now(), '{{\"name\": \"report\"}}')")
        conn.execute(f"insert into {schema}.scheduler_state (task, watermark_ms, updated_at, dispatched)"
                     f" values ('nightly', 1700000000000, now(), 4)")
    if release.version >= 4:
        conn.execute(f"insert into {schema}.job_steps (job_id, name, kind, state, attempt, result, started_at)"
                     f" values (2, 'fetch', 'run', 'completed', 1, '42', now())")
        conn.execute(f"insert into {schema}.events (name, key, payload, sent_at)"
                     f" values ('order.paid', 'o-1', '{{}}', now())")
    if release.version >= 8:
        conn.execute(f"insert into {schema}.job_rates (queue, minute, outcome, n)"
                     f" values ('old', date_trunc('minute', now()), 'completed', 5)")


_ROWS = {   # what must survive an upgrade, table by table (lease_token: see the test)
    "jobs": "id, name, queue, state, payload::text, tenant, idempotency_key, attempt, run_at, finished_at, claimed_by",
    "job_history": "job_id, at, attempt, outcome, error",
    "queues": "name, paused, changed_at, changed_by",
    "outbox": "id, staged_at, job::text",
    "scheduler_state": "task, watermark_ms, dispatched",
    "job_steps": "job_id, name, kind, state, result::text",
    "events": "id, name, key, sent_at",
    "job_rates": "queue, minute, outcome, n",
}


def _rows(conn: psycopg.Connection, schema: str) -> dict[str, list[tuple]]:
    found = {}
    for table, columns in _ROWS.items():
        if conn.execute("select to_regclass(%s)", (f"{schema}.{table}",)).fetchone()[0] is not None:  # type: ignore[index]
            found[table] = conn.execute(f"select {columns} from {schema}.{table} order by 1, 2").fetchall()
    return found


@pytest.mark.parametrize("release", HISTORY, ids=lambda r: f"v{r.version}-{r.commit}")
def test_an_upgrade_from_each_release_equals_a_fresh_install(pg_dsn, schema, fresh_catalog, release):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        install_release(conn, release, schema)
        _write_rows(conn, schema, release)
        before = _rows(conn, schema)
        driver = PostgresDriver(pg_dsn, schema=schema)
        try:
            applied = driver.migrate()
            assert applied == [m.label for m in migrations()[release.version:]]
            diff = catalog_diff(fresh_catalog, catalog(conn, schema))
            assert diff == [], f"upgraded from {release.commit} ({release.note}):\n" + "\n".join(diff)
            after = _rows(conn, schema)
            assert {t: after[t] for t in before} == before
            token = conn.execute(f"select lease_token from {schema}.jobs where id = 3").fetchone()[0]  # type: ignore[index]
            assert token == (None if release.commit == "a3592a1" else 7)   # uuid tokens fence nothing
            # today's code works on what the old release left: the ready job is claimed and settled
            [claimed] = driver.job_claim(Claim(["old"], 10, 30_000, "w-new"))
            assert (claimed.id, driver.job_ack(claimed.id, claimed.token)) == (1, True)
            assert [h["error"] for h in driver.job_get(2).history] == ["boom"]
        finally:
            driver.close()


@pytest.mark.parametrize("commit, drift", [
    ("a3592a1", 'columns: unexpected ["jobs", 13, "lease_token", "uuid"'),
    ("a3592a1", 'indexes: unexpected ["jobs_running_worker_idx"'),
    ("3f9b059", 'columns: missing ["job_history", 6, "seq", "bigint"'),
    ("9c90c3b", 'indexes: missing ["jobs_dead_idx"'),
    ("d2c8da2", 'relations: missing ["crashed_workers"'),
    ("7693b2d", 'USING btree (name, key, id)'),
    ("c9057f4", 'constraints: unexpected ["job_rates", "job_rates_pkey", "p", "PRIMARY KEY (queue, minute, outcome)"'),
])
def test_the_comparison_sees_each_drift_an_upgrade_repairs(pg_dsn, schema, fresh_catalog, commit, drift):
    """As each release left it, before any migration: the drift the upgrade test proves repaired
    is there to see (the comparison can fail)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        install_release(conn, _release(commit), schema)
        diff = catalog_diff(fresh_catalog, catalog(conn, schema))
    assert [line for line in diff if drift in line], "\n".join(diff)


def _git(*args: str) -> bytes | None:
    try:
        run = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout if run.returncode == 0 else None


@pytest.mark.parametrize("release", HISTORY, ids=lambda r: r.commit)
def test_each_history_fixture_is_the_file_its_release_shipped(release):
    shipped = _git("show", f"{release.commit}:xjobs/drivers/schema.sql")
    if shipped is None:
        pytest.skip(f"commit {release.commit} is not in this checkout's history (a shallow clone or an sdist)")
    assert release.path.read_bytes() == shipped
    sql_py = (_git("show", f"{release.commit}:xjobs/drivers/sql.py") or b"").decode()
    assert ('.replace("{version}"' in sql_py) == release.versioned
    if release.versioned:
        assert f"\nSCHEMA_VERSION = {release.version}\n" in sql_py
    else:
        assert "values ('schema_version', '1')" in shipped.decode()


def test_every_schema_file_ever_shipped_is_in_the_history():
    log = _git("log", "--format=%H", "--diff-filter=AM", "--", "xjobs/drivers/schema.sql")
    if log is None:
        pytest.skip("not a git checkout with its history")
    shipped = log.decode().split()
    assert sorted(c for c in shipped if not any(c.startswith(r.commit) for r in HISTORY)) == []
    assert len(shipped) == len(HISTORY)


# -- no change to the schema without a new migration -------------------------------------------


def test_released_migrations_are_never_edited():
    recorded = recorded_checksums()
    shipped = {f"{m.label}.sql": m.checksum for m in migrations()}
    edited = sorted(name for name in recorded if name in shipped and shipped[name] != recorded[name])
    assert edited == [], (
        f"released migrations were edited: {edited}. Databases in the field ran them as they were "
        f"released, so an edit never reaches them: put the file(s) back (git checkout) and make the "
        f"change in a new migration, xjobs/drivers/migrations/{SCHEMA_VERSION + 1:04d}_<what>.sql")
    assert sorted(set(recorded) - set(shipped)) == [], "a released migration was removed"
    assert sorted(set(shipped) - set(recorded)) == [], (
        "new migration(s) without a recorded checksum: once final, record them with "
        "`python -m tests.migration_fixtures record`")


def test_a_fresh_install_produces_the_recorded_catalog(fresh_catalog):
    recorded = json.loads(SNAPSHOT.read_text())
    diff = catalog_diff(recorded["catalog"], fresh_catalog)
    if recorded["version"] != SCHEMA_VERSION:
        pytest.fail(f"migration {SCHEMA_VERSION} is new (the recorded catalog is version {recorded['version']}): "
                    f"record its catalog with `python -m tests.migration_fixtures record`")
    assert diff == [], (
        f"the schema a fresh install produces changed without a new migration (recorded on "
        f"PostgreSQL {recorded['postgres']}); a released migration or the installer was changed. "
        f"Put it back and add migration {SCHEMA_VERSION + 1:04d}:\n" + "\n".join(diff))


# Statements that break the code of the version before, in a migration that says it serves it;
# each allowed one says why it is safe.
_BREAKING = re.compile(r"\bdrop\s+(table|column|constraint|function|view)\b|\brename\b"
                       r"|\balter\s+column\s+\w+\s+(set\s+data\s+)?type\b|\bset\s+not\s+null\b"
                       r"|\badd\s+column\s+(if\s+not\s+exists\s+)?\w+\s+[^,;]*\bnot\s+null\b(?![^,;]*\b(default|identity)\b)",
                       re.IGNORECASE)
_ALLOWED = {
    ("0009_drift_and_suspect_groups", "alter column lease_token type"): "only where the tokens were uuid, which no "
                                                            "release since could use",
    ("0009_drift_and_suspect_groups", "drop constraint"): "the same key re-added in the same statement; an "
                                              "on conflict target matches its columns in any order",
    ("0012_workflows", "drop constraint"): "the step kinds' check re-added wider in the same statement",
}


def test_a_migration_that_serves_the_previous_code_only_adds():
    found = []
    for m in migrations():
        if not m.compatible_with_previous:
            continue
        text = re.sub(r"--[^\n]*", "", m.text)
        for match in _BREAKING.finditer(text):
            if not any(label == m.label and snippet in text[match.start():match.start() + 60].lower()
                       for label, snippet in _ALLOWED):
                found.append(f"{m.label}: {match.group(0)!r}")
    assert found == [], ("these migrations say the previous version's code runs on what they leave "
                         "(compatible-with-previous: yes), but they drop, rename or retype:\n" + "\n".join(found))


def test_the_migrations_load_in_order_and_each_says_whom_it_serves():
    plan = migrations()
    assert [m.version for m in plan] == list(range(1, SCHEMA_VERSION + 1))
    assert not plan[0].compatible_with_previous and all(m.compatible_with_previous for m in plan[1:])
    assert [serves_from(plan, v) for v in (1, 2, SCHEMA_VERSION)] == [1, 1, 1]
    later = [*plan, Migration.parse(f"{SCHEMA_VERSION + 1:04d}_split.sql", "-- compatible-with-previous: no\nselect 1;")]
    assert serves_from(later, SCHEMA_VERSION + 1) == SCHEMA_VERSION + 1


@pytest.mark.parametrize("name, text, problem", [
    ("10_x.sql", "-- compatible-with-previous: yes\n", "NNNN_name.sql"),
    ("0010_x.sql", "select 1;\n", "compatible-with-previous"),
    ("0010_x.sql", "-- compatible-with-previous: maybe\n", "compatible-with-previous"),
    ("0010_x.sql", "-- compatible-with-previous: yes\n-- compatible-with-previous: no\n", "once"),
    ("0010_x.sql", "-- compatible-with-previous: yes\nselect 1 from {schema}.t where v = {version};\n",
     "{version}"),
])
def test_a_malformed_migration_is_refused(name, text, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        Migration.parse(name, text)


def test_a_gap_in_the_numbers_is_refused():
    plan = list(migrations())
    with pytest.raises(ValueError, match="without gaps"):
        check_sequence(plan[:3] + plan[4:])


# -- xjobsd migrate, --status, --dry-run -------------------------------------------------------


@pytest.fixture
def xjobsd(pg_dsn, schema, capsys, monkeypatch, tmp_path):
    """``xjobsd ARGS`` on the test's schema, in this process (its parser, dispatch and exit
    code; a subprocess would spend more on its imports than the command takes)."""
    from xjobs.cli import main
    monkeypatch.chdir(tmp_path)      # no xjobs.toml or pyproject.toml of ours in the way

    def run(*args: str, expect: int = 0) -> Any:
        capsys.readouterr()
        code = main([*args, "--dsn", pg_dsn, "--schema", schema])
        out = capsys.readouterr()
        assert code == expect, (code, out.out, out.err)
        return out
    return run


def _release(commit: str) -> Release:
    return next(r for r in HISTORY if r.commit == commit)


def test_migrate_status_lists_applied_and_pending_then_migrate_says_what_it_applied(xjobsd, pg_dsn, schema):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        install_release(conn, _release("92af4db"), schema)     # version 7, by the code of its day
    text = xjobsd("migrate", "--status").out
    assert f"schema {schema!r}: version 7; this xjobs: version {SCHEMA_VERSION}" in text
    lines = {line.split()[1]: line for line in text.splitlines() if re.match(r"^\d+\s", line)}
    assert "applied  by an xjobs older than the ledger" in lines["0007_jobs_fillfactor"]
    # every later migration is pending, whichever were added since
    later = [m.label for m in migrations()[7:]]
    assert [lines[label].split()[2:] for label in later] == [["pending"]] * len(later)
    assert f"{len(later)} pending" in text
    status = orjson.loads(xjobsd("migrate", "--status", "--json").out)
    assert (status["version"], status["compatible_from"], status["pending"]) == (7, None, len(later))
    assert [(m["version"], m["state"]) for m in status["migrations"]] == (
        [(v, "applied") for v in range(1, 8)] + [(v, "pending") for v in range(8, SCHEMA_VERSION + 1)])

    assert xjobsd("migrate").out.splitlines() == [f"applied {label}" for label in later] + [
        f"xjobs: schema {schema!r} is up to date (version {SCHEMA_VERSION})"]
    assert xjobsd("migrate").out.splitlines() == [f"xjobs: schema {schema!r} is up to date (version {SCHEMA_VERSION})"]
    status = orjson.loads(xjobsd("migrate", "--status", "--json").out)
    assert (status["version"], status["compatible_from"], status["pending"]) == (SCHEMA_VERSION, 1, 0)
    by_version = {m["version"]: m for m in status["migrations"]}
    assert by_version[7]["checksum"] is None and by_version[7]["applied_at"] is None
    newest = by_version[SCHEMA_VERSION]
    assert newest["checksum"] == newest["file_checksum"] == migrations()[-1].checksum
    assert newest["applied_at"] is not None and not newest["edited"]


def test_migrate_dry_run_prints_exactly_what_migrate_would_run_and_applies_nothing(xjobsd, pg_dsn, schema,
                                                                                 fresh_catalog):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        install_release(conn, _release("7693b2d"), schema)     # the first version 4
        before = catalog(conn, schema)
        script = xjobsd("migrate", "--dry-run").out
        assert catalog(conn, schema) == before                  # nothing applied
        pending = list(range(5, SCHEMA_VERSION + 1))
        assert [int(v) for v in re.findall(r"^-- migration (\d{4})_", script, re.MULTILINE)] == pending
        assert script.count("begin;") == len(pending) and script.count("commit;") == len(pending)
        assert f"create index events_lookup_idx on {schema}.events (name, key, sent_at, id);" in script
        # the printed script, run as it is, leaves what a migrate leaves: a fresh install
        conn.execute(script)
        assert catalog_diff(fresh_catalog, catalog(conn, schema)) == []
    assert xjobsd("migrate", "--dry-run").out == f"-- schema {schema!r} is at version {SCHEMA_VERSION}: nothing to run\n"


def test_migrate_json_and_dry_run_do_not_mix(xjobsd):
    assert "X_INVALID_OPTION" in xjobsd("migrate", "--dry-run", "--json", expect=2).err


# -- the lock ----------------------------------------------------------------------------------


@pytest.fixture
def private_database(pg_dsn: str) -> Iterator[str]:
    """A database of its own: the installers' advisory lock is per database, and a test that
    holds it must not hold up every other test's install."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    name = "xjobs_" + new_schema_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create database {name}")
    try:
        yield make_conninfo(**{**conninfo_to_dict(pg_dsn), "dbname": name})  # type: ignore[arg-type]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"drop database if exists {name} with (force)")


def _hold_the_installers_lock(dsn: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("select pg_advisory_lock(%s)", (0x786A6F6273,))
    return conn


def _lock_waiters(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select count(*) from pg_locks where locktype = 'advisory' and not granted"  # type: ignore[index]
                            " and database = (select oid from pg_database where datname = current_database())"
                            ).fetchone()[0]


def test_two_migrates_at_once_one_applies_everything_the_other_finds_it_current(private_database):
    from tests.waiting import wait_for
    env = {**os.environ, "XJOBS_DATABASE_URL": private_database, "XJOBS_SCHEMA": "xjobs"}
    holder = _hold_the_installers_lock(private_database)      # both are started before either may go
    procs: list[subprocess.Popen] = []
    outputs = []
    try:
        try:
            procs = [subprocess.Popen([sys.executable, "-m", "xjobs.cli", "migrate"], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(2)]
            wait_for(lambda: _lock_waiters(private_database) == 2, 30, "both migrates to wait for the lock")
        finally:
            holder.close()
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (out, err)
            outputs.append(out.splitlines())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    everything = [f"applied {m.label}" for m in migrations()] + [f"xjobs: schema 'xjobs' is up to date (version {SCHEMA_VERSION})"]
    assert sorted(outputs, key=len) == [[f"xjobs: schema 'xjobs' is up to date (version {SCHEMA_VERSION})"], everything]
    with psycopg.connect(private_database) as conn:
        assert conn.execute("select version from xjobs.migrations order by 1").fetchall() == [
            (v,) for v in range(1, SCHEMA_VERSION + 1)]


class _Counting:
    """A connection that counts what is executed on it."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def execute(self, query: Any, params: Any = None) -> Any:
        self.statements.append(str(query))
        return self.conn.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_a_current_schema_is_one_read_and_takes_no_lock(private_database, monkeypatch):
    from xjobs.drivers.pg_install import install
    driver = PostgresDriver(private_database)
    driver.migrate()
    driver.close()
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2s")      # a lock wait fails instead of hanging
    holder = _hold_the_installers_lock(private_database)      # an installer at work elsewhere
    try:
        with psycopg.connect(private_database, autocommit=True) as conn:
            counted = _Counting(conn)
            assert install(counted, "xjobs", 10_000.0) == []   # type: ignore[arg-type]
            assert len(counted.statements) == 1 and "meta" in counted.statements[0]
            assert install(counted, "xjobs", 10_000.0, upgrade=False) == []   # type: ignore[arg-type]
    finally:
        holder.close()
