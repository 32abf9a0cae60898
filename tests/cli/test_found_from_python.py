"""A Python process started where ``xjobsd run`` keeps its record (``./.xjobs/daemon.json``)
finds that daemon's database with nothing configured, as the commands run there do; when the
record's daemon is gone it is refused, naming each place it looked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from xjobs.daemon_record import record_daemon
from xjobs.drivers.postgres import PostgresDriver

pytestmark = pytest.mark.postgres

# declares a job, enqueues it and reads it back with no xjobs.configure() and no XJOBS_*
SHELL = """
import sys, orjson, xjobs

@xjobs.job(queue="shell", idempotency_key=lambda i: f"hi:{i['n']}", tenant="none")
def hello(ctx, input):
    pass

try:
    job = hello.enqueue({"n": 1})
except xjobs.XJobsError as exc:
    print(exc, file=sys.stderr)
    sys.exit(3)
print(orjson.dumps({"job": job.get(), "queues": xjobs.queues()}).decode())
"""


def nothing_configured(**extra: str) -> dict[str, str]:
    """This environment without a database named in it (the test run's own may name one)."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("XJOBS_")}, **extra}


def python_in(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SHELL], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def xjobsd_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xjobs.cli", *args], cwd=cwd, env=nothing_configured(),
                          capture_output=True, text=True, timeout=60)


def dead_pid() -> int:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()   # reaped: no process has this pid now
    return gone.pid


@pytest.fixture
def installed(pg_dsn: str, pg_schema: str) -> str:
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    try:
        driver.migrate()
    finally:
        driver.close()
    return pg_schema


def test_a_python_shell_beside_a_running_daemon_enqueues_and_reads_on_its_database(tmp_path, pg_dsn, installed):
    # this test's process stands for the daemon: a live pid of this user's
    record_daemon({"pid": os.getpid(), "dsn": pg_dsn, "schema": installed}, root=tmp_path / ".xjobs")
    shell = python_in(tmp_path, nothing_configured())
    assert shell.returncode == 0, shell.stderr
    read = orjson.loads(shell.stdout)
    assert read["job"]["name"] == "hello" and read["job"]["state"] == "ready"
    assert [q["name"] for q in read["queues"]] == ["shell"]
    # the command line, run in the same place, finds the same database and prints the same job
    shown = xjobsd_in(tmp_path, "jobs", "show", str(read["job"]["id"]), "--json")
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout) == read["job"]


def test_with_the_recorded_daemon_gone_it_is_refused_naming_where_it_looked(tmp_path, pg_dsn, installed):
    record_daemon({"pid": dead_pid(), "dsn": pg_dsn, "schema": installed}, root=tmp_path / ".xjobs")
    shell = python_in(tmp_path, nothing_configured())
    assert shell.returncode == 3, (shell.stdout, shell.stderr)
    said = shell.stderr.strip()
    assert said.startswith("X_NOT_CONFIGURED: no database configured")
    for place in ("xjobs.configure()", "XJOBS_DATABASE_URL", "xjobs.toml",
                  f"{tmp_path / '.xjobs' / 'daemon.json'} names pid", "which is not running"):
        assert place in said, said
    assert "Start `xjobsd run` here, set XJOBS_DATABASE_URL, or call xjobs.configure(dsn=...)" in said
    bare = tmp_path / "elsewhere"
    bare.mkdir()
    said = python_in(bare, nothing_configured()).stderr
    assert f"no {bare / '.xjobs' / 'daemon.json'}" in said, said


def test_a_database_named_in_the_environment_wins_over_the_record(tmp_path, pg_dsn, installed):
    # a record pointing nowhere: were it read, the enqueue could not connect
    record_daemon({"pid": os.getpid(), "dsn": "postgresql://nobody@127.0.0.1:1/none", "schema": "elsewhere"},
                  root=tmp_path / ".xjobs")
    shell = python_in(tmp_path, nothing_configured(XJOBS_DATABASE_URL=pg_dsn, XJOBS_SCHEMA=installed))
    assert shell.returncode == 0, shell.stderr
    assert orjson.loads(shell.stdout)["job"]["state"] == "ready"
