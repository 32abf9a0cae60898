"""Rolling deploys and the schema checks at start.

Between two consecutive versions a migration is additive, so the previous release's workers
keep draining jobs on the new schema while the fleet is upgraded; this code runs on a schema
one version newer that says it still serves it, and refuses one that does not. ``xjobsd run``
and ``xjobsd tick`` refuse a newer schema that does not serve them, and with ``--no-migrate``
an older one, with exit 2 and the code.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Iterator

import orjson
import psycopg
import pytest

import xjobs
from tests.daemon_fixtures import DaemonEnv, wait_for
from tests.fixtures import drop_schema, new_schema_name
from tests.migration_fixtures import HISTORY, catalog, install_release
from tests.apps.daemon_app import effects_ddl
from xjobs import testing
from xjobs.config import load_settings
from xjobs.drivers.base import NewJob
from xjobs.drivers.pg_install import install
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.sql import SCHEMA_VERSION, Migration, migrations
from xjobs.enqueue import enqueue_many
from xjobs.errors import InvalidOption, SchemaOutdated, SchemaTooNew

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.postgres

# The last commit whose code is the previous schema version the fleet ran: the code before
# migration 18. With each new migration, move it to the last commit of the version before: the test below
# checks it is.
PREVIOUS_RELEASE = "ac495d4"
PREVIOUS_VERSION = 17
NEXT = SCHEMA_VERSION + 1       # the version the next release's migration would make


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = new_schema_name()
    try:
        yield name
    finally:
        drop_schema(pg_dsn, name)


def _one_version_newer(dsn: str, schema: str, serves_previous: bool) -> None:
    """The schema as the NEXT release would leave it: this code's migrations, then one more."""
    future = Migration.parse(f"{NEXT:04d}_future.sql", (
        f"-- compatible-with-previous: {'yes' if serves_previous else 'no'}\n"
        "alter table {schema}.jobs add column if not exists future_note text;\n"
        "create table if not exists {schema}.future_things (id bigint primary key);\n"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        install(conn, schema, 10_000.0, plan=[*migrations(), future])


def _meta(dsn: str, schema: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f"select key, value from {schema}.meta").fetchall())


# -- the previous release on this schema -------------------------------------------------------

OLD_WORKER = """
import json, os, sys
import xjobs
from xjobs import Terminal, job, testing
from xjobs.drivers import sql
from xjobs.drivers.postgres import PostgresDriver

assert xjobs.__file__.startswith(sys.argv[1]), xjobs.__file__   # the previous release, not this code

@job(queue="rolling", idempotency_key=lambda i: f"sum:{i['n']}", tenant="none")
def rolling_sum(ctx, input):
    ctx.progress(0, 1, "adding")
    return ctx.step.run("add", lambda: input["a"] + input["b"])

@job(queue="rolling", idempotency_key=lambda i: f"refused:{i['n']}", tenant="none")
def rolling_refused(ctx, input):
    raise Terminal("refused on purpose")

driver = PostgresDriver(os.environ["XJOBS_DATABASE_URL"], schema=os.environ["XJOBS_SCHEMA"])
driver.migrate()     # its own boot: a schema at its version or newer is left alone
xjobs.configure(driver=driver)
rolling_sum.enqueue_many([{"n": n, "a": n, "b": 1} for n in range(100, 105)])   # it enqueues too
summary = testing.run_until_idle("rolling", driver=driver, concurrency=4)
print(json.dumps({"schema_version": sql.SCHEMA_VERSION, "jobs": summary.jobs}))
"""


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's ``xjobs`` package, extracted from git."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE, "xjobs"],
                                 capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"git is not at hand to extract the previous release {PREVIOUS_RELEASE}: {exc}")
    if archive.returncode != 0:
        pytest.skip(f"commit {PREVIOUS_RELEASE} (the previous schema version's code) is not in this "
                    f"checkout's history (a shallow clone or an sdist): {archive.stderr.decode().strip()}")
    tree = tmp_path_factory.mktemp("previous-release")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):     # Python 3.11.4 and later
            tar.extractall(tree, filter="data")
        else:
            tar.extractall(tree)                # our own repository's archive
    return tree


def test_the_previous_release_drains_jobs_on_the_new_schema(pg_dsn, schema, previous_release, tmp_path):
    driver = PostgresDriver(pg_dsn, schema=schema)
    try:
        driver.migrate()
        driver.job_enqueue([NewJob(name="rolling_sum", queue="rolling", idempotency_key=f"sum:{n}",
                                   payload=orjson.dumps({"n": n, "a": n, "b": 1})) for n in range(5)]
                           + [NewJob(name="rolling_refused", queue="rolling", idempotency_key="refused:1",
                                     payload=orjson.dumps({"n": 1}))])
    finally:
        driver.close()
    with psycopg.connect(pg_dsn) as conn:
        before = catalog(conn, schema)
    env = {**os.environ, "PYTHONPATH": str(previous_release), "XJOBS_DATABASE_URL": pg_dsn,
           "XJOBS_SCHEMA": schema}
    run = subprocess.run([sys.executable, "-c", OLD_WORKER, str(previous_release)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-4000:]
    answer = json.loads(run.stdout.splitlines()[-1])
    assert answer["schema_version"] == PREVIOUS_VERSION, (
        f"{PREVIOUS_RELEASE} is not the previous schema version's code: move PREVIOUS_RELEASE")
    assert answer["jobs"] == {"rolling_sum": {"completed": 10}, "rolling_refused": {"dead": 1}}
    with psycopg.connect(pg_dsn) as conn:
        states = conn.execute(f"select name, state, count(*) from {schema}.jobs group by 1, 2 order by 1").fetchall()
        steps = conn.execute(f"select count(*) from {schema}.job_steps where name = 'add' and state = 'completed'"  # type: ignore[index]
                             ).fetchone()[0]
        history = conn.execute(f"select outcome, error from {schema}.job_history").fetchall()
        assert catalog(conn, schema) == before            # its boot changed nothing
    assert states == [("rolling_refused", "dead", 1), ("rolling_sum", "completed", 10)]
    assert steps == 10 and [outcome for outcome, _ in history] == ["dead"]
    assert "refused on purpose" in history[0][1]


# -- this code on a newer schema ---------------------------------------------------------------


def test_this_code_runs_on_a_newer_schema_that_still_serves_it(pg_dsn, schema, caplog):
    _one_version_newer(pg_dsn, schema, serves_previous=True)
    registry = xjobs.Registry()
    xjobs.job(queue="next", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry,
              name="double")(lambda ctx, i: ctx.step.run("double", lambda: 2 * i["n"]))
    driver = PostgresDriver(pg_dsn, schema=schema)
    try:
        with caplog.at_level(logging.WARNING, logger="xjobs.migrate"):
            assert driver.migrate() == [] and driver.migrate(upgrade=False) == []
        [warned, _] = [r for r in caplog.records if getattr(r, "event", None) == "schema.newer"]
        assert (warned.version, warned.code_version, warned.compatible_from) == (NEXT, SCHEMA_VERSION, 1)
        enqueue_many(registry.get("double"), [{"n": n} for n in range(3)], driver=driver)
        assert testing.run_until_idle("next", driver=driver, registry=registry).jobs == {"double": {"completed": 3}}
    finally:
        driver.close()
    assert _meta(pg_dsn, schema)["schema_version"] == str(NEXT)


def test_this_code_refuses_a_newer_schema_that_does_not_serve_it(pg_dsn, schema):
    _one_version_newer(pg_dsn, schema, serves_previous=False)
    driver = PostgresDriver(pg_dsn, schema=schema)
    try:
        for upgrade in (True, False):
            with pytest.raises(SchemaTooNew) as err:
                driver.migrate(upgrade=upgrade)
            assert (err.value.installed, err.value.code_version, err.value.option) == (NEXT, SCHEMA_VERSION, "schema")
            assert f"is at version {NEXT}, which serves the code of version {NEXT} and later; this xjobs is " \
                   f"version {SCHEMA_VERSION}" in str(err.value)
    finally:
        driver.close()


def test_an_outdated_schema_is_refused_when_upgrading_is_not_allowed_and_left_as_it_was(pg_dsn, schema):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        install_release(conn, HISTORY[-1], schema)           # version 8, before migrations
        before = catalog(conn, schema)
    driver = PostgresDriver(pg_dsn, schema=schema)
    try:
        with pytest.raises(SchemaOutdated, match=f"is at version 8, this xjobs needs version {SCHEMA_VERSION}"):
            driver.migrate(upgrade=False)
        with psycopg.connect(pg_dsn) as conn:
            assert catalog(conn, schema) == before
        assert driver.migrate(upgrade=True) == [m.label for m in migrations()[8:]]
    finally:
        driver.close()


def test_the_migrate_setting_comes_from_the_flag_the_environment_or_the_file(tmp_path):
    assert load_settings(env={}).migrate is True
    assert load_settings(env={"XJOBS_MIGRATE": "false"}).migrate is False
    assert load_settings(env={"XJOBS_MIGRATE": "false"}, migrate=True).migrate is True
    config = tmp_path / "xjobs.toml"
    config.write_text("[xjobs]\nmigrate = false\n")
    assert load_settings(str(config), env={}).migrate is False
    with pytest.raises(InvalidOption) as err:
        load_settings(env={"XJOBS_MIGRATE": "sometimes"})
    assert err.value.option == "migrate"


# -- xjobsd run and tick refuse --------------------------------------------------------------


def _at_version_8(env: DaemonEnv) -> None:
    """The daemon's schema as the last release before migrations left it."""
    env.sql("drop schema {schema} cascade")
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        install_release(conn, HISTORY[-1], env.schema)
    env.sql(effects_ddl(env.schema))


@pytest.mark.daemon
def test_xjobsd_run_refuses_a_newer_schema_that_does_not_serve_it(daemon_env):
    _one_version_newer(daemon_env.dsn, daemon_env.schema, serves_previous=False)
    daemon = daemon_env.start()
    assert daemon.wait(60) == 2, daemon.output()
    assert f"X_SCHEMA_TOO_NEW: schema: {daemon_env.schema!r} is at version {NEXT}" in daemon.output()


@pytest.mark.daemon
@pytest.mark.parametrize("how", ["--no-migrate", "XJOBS_MIGRATE=false"])
def test_xjobsd_run_told_not_to_migrate_refuses_an_outdated_schema(daemon_env, how):
    _at_version_8(daemon_env)
    daemon = daemon_env.start("--no-migrate") if how == "--no-migrate" else daemon_env.start(XJOBS_MIGRATE="false")
    assert daemon.wait(60) == 2, daemon.output()
    assert f"X_SCHEMA_OUTDATED: schema: {daemon_env.schema!r} is at version 8, this xjobs needs version " \
           f"{SCHEMA_VERSION}" in daemon.output()
    assert _meta(daemon_env.dsn, daemon_env.schema)["schema_version"] == "8"


@pytest.mark.daemon
def test_xjobsd_run_on_a_newer_schema_that_serves_it_runs_and_says_so(daemon_env):
    _one_version_newer(daemon_env.dsn, daemon_env.schema, serves_previous=True)
    daemon = daemon_env.start("--queue", "alpha=1x2")
    daemon.ready()
    assert "newer than this xjobs" in daemon.output()
    [job_id] = daemon_env.enqueue("touch_alpha", "alpha", [{"n": 1}], key=lambda i: f"a:{i['n']}")
    wait_for(lambda: daemon_env.job(job_id)["state"] == "completed", 30, "the job to complete")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def _tick(env: DaemonEnv, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xjobs.cli", "tick", "--app", "tests.apps.daemon_app",
                           "--queue", "alpha", "--deadline", "5s", *args], cwd=ROOT, env=env.process_env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.daemon
def test_xjobsd_tick_checks_the_schema_as_a_daemon_does(daemon_env):
    _at_version_8(daemon_env)
    refused = _tick(daemon_env, "--no-migrate")
    assert refused.returncode == 2 and "X_SCHEMA_OUTDATED" in refused.stderr, refused.stderr
    assert _meta(daemon_env.dsn, daemon_env.schema)["schema_version"] == "8"
    upgraded = _tick(daemon_env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert _meta(daemon_env.dsn, daemon_env.schema)["schema_version"] == str(SCHEMA_VERSION)
    daemon_env.sql("update {schema}.meta set value = '" + str(NEXT) + "' where key in ('schema_version', 'compatible_from')")
    too_new = _tick(daemon_env)
    assert too_new.returncode == 2 and "X_SCHEMA_TOO_NEW" in too_new.stderr, too_new.stderr
