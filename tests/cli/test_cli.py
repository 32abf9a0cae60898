"""``xjobsd`` as an operator types it: a subprocess, JSON out, exit codes 0/1/2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime

import pytest

from tests.cli.commands import ROOT, as_json
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.base import Claim

pytestmark = pytest.mark.postgres
JOB_FIELDS = {"id", "name", "queue", "state", "attempt", "max_attempts", "tenant", "idempotency_key",
              "priority", "run_at", "last_error", "created_at", "finished_at"}


@pytest.mark.slow
def test_operator_round_trip(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    xjobsd("migrate")  # idempotent
    first = as_json(xjobsd("enqueue", "greet", "--app", "tests.apps.cli_app", "--json",
                           "--input", '{"user": 1, "org": "acme"}'))
    again = as_json(xjobsd("enqueue", "greet", "--app", "tests.apps.cli_app", "--json",
                           "--input", '{"user": 1, "org": "acme"}'))
    assert again == {**first, "deduped": True} and first["deduped"] is False

    [listed] = as_json(xjobsd("jobs", "ls", "--json", "--queue", "mail", "--state", "ready"))
    assert JOB_FIELDS <= set(listed)
    assert (listed["id"], listed["tenant"], listed["idempotency_key"]) == (first["id"], "acme", "greet:1")
    datetime.fromisoformat(listed["run_at"])  # ISO-8601, not epoch numbers
    assert as_json(xjobsd("jobs", "ls", "--json", "--name", "other")) == []

    odd = as_json(xjobsd("enqueue", "greet", "--app", "tests.apps.cli_app", "--json",
                         "--input", '{"user": 2, "org": "acme", "at": 1e30, "run_at": 5}'))
    assert as_json(xjobsd("jobs", "show", str(odd["id"]), "--json"))["payload"] == {
        "user": 2, "org": "acme", "at": 1e30, "run_at": 5}     # payload data is never reformatted
    xjobsd("jobs", "cancel", str(odd["id"]))
    shown = as_json(xjobsd("jobs", "show", str(first["id"]), "--json"))
    assert JOB_FIELDS <= set(shown) and shown["payload"] == {"user": 1, "org": "acme"}
    assert [h["outcome"] for h in shown["history"]] == ["enqueued"]   # nothing has run it yet

    cancelled = as_json(xjobsd("jobs", "cancel", str(first["id"]), "--json", "--reason", "no longer needed"))
    assert cancelled["state"] == "cancelled"    # who asked, and why
    assert re.fullmatch(r"cancelled by cli:\S+: no longer needed", cancelled["last_error"])
    xjobsd("jobs", "cancel", str(first["id"]), expect=1)  # a finished job is not cancellable

    retried = as_json(xjobsd("jobs", "retry", str(first["id"]), "--json"))
    assert (retried["state"], retried["attempt"]) == ("ready", 0)
    assert [h["outcome"] for h in retried["history"]] == ["enqueued", "cancelled", "requeued"]
    assert retried["history"][2]["error"].startswith("retried by cli:")
    xjobsd("jobs", "retry", str(first["id"]), expect=1)   # only dead or cancelled jobs

    assert as_json(xjobsd("jobs", "stats", "--json")) == {"mail": {"ready": 1, "cancelled": 1}}
    assert as_json(xjobsd("jobs", "dead", "--json")) == []
    table = xjobsd("jobs", "ls").stdout
    assert table.splitlines()[0].split()[:4] == ["ID", "NAME", "QUEUE", "STATE"]


def test_dead_letters_are_listed(xjobsd, pg_dsn, pg_schema):
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    driver.migrate()
    from xjobs.drivers.base import Nack, NewJob
    [e] = driver.job_enqueue([NewJob(name="greet", queue="mail", payload=b"{}", idempotency_key="k",
                                     max_attempts=1)])
    [claimed] = driver.job_claim(Claim(["mail"], 1, 30_000, "w"))
    driver.job_nack(Nack(claimed.id, claimed.token, "dead", error="ValueError: nope -- dead"))
    driver.close()
    [dead] = as_json(xjobsd("jobs", "dead", "--json"))
    assert (dead["id"], dead["state"], dead["last_error"]) == (e.id, "dead", "ValueError: nope -- dead")
    assert dead["finished_at"] is not None


@pytest.mark.parametrize("args,code", [
    (["jobs", "show", "999999"], 1),
    (["jobs", "ls", "--limit", "-1"], 2),
    (["jobs", "ls", "--state", "exploded"], 2),
    (["enqueue", "nope", "--app", "tests.apps.cli_app", "--input", "{}"], 2),
    (["enqueue", "greet", "--app", "tests.apps.cli_app", "--input", "{not json"], 2),
    (["enqueue", "greet", "--app", "tests.apps.cli_app", "--input", '{"user": 1}'], 2),
    (["enqueue", "greet", "--app", "no.such.module", "--input", "{}"], 2),
    (["enqueue", "greet", "--app", "tests.apps.cli_app", "--input", '{"user": 1, "org": "a"}',
      "--delay", "nan"], 2),
    (["jobs"], 2),
    (["jobs", "ls", "--dsn", "nonsense=1"], 2),
    (["jobs", "ls", "--dsn", "postgresql://postgres@127.0.0.1:1/none"], 1),
])
def test_bad_usage_exits_with_a_clear_code(xjobsd, args, code):
    xjobsd("migrate")
    proc = xjobsd(*args, expect=code)
    assert proc.stderr.strip(), "a refusal says why"


@pytest.mark.parametrize("given,named", [("[1, 2]", "list [1, 2]"), ('"alice"', "str 'alice'"), ("7", "int 7")])
def test_an_input_that_is_no_json_object_is_refused_as_such(xjobsd, given, named):
    xjobsd("migrate")
    proc = xjobsd("enqueue", "greet", "--app", "tests.apps.cli_app", "--input", given, expect=2)
    assert f"input must be a JSON object, got {named}" in proc.stderr, proc.stderr


def test_a_misspelt_variable_is_warned_about_with_the_one_it_is_closest_to(pg_dsn, pg_schema):
    env = {**os.environ, "XJOBS_DATABASE_URL": pg_dsn, "XJOBS_SCHEMA": pg_schema, "XJOBS_LEASEE": "30s",
           "XJOBS_NOTHING_LIKE_IT": "1"}
    proc = subprocess.run([sys.executable, "-m", "xjobs.cli", "migrate"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc
    assert "XJOBS_LEASEE is not a variable xjobs reads; it is ignored (did you mean XJOBS_LEASE?)" in proc.stderr
    assert "XJOBS_NOTHING_LIKE_IT is not a variable xjobs reads; it is ignored\n" in proc.stderr
    assert "XJOBS_DATABASE_URL" not in proc.stderr and "XJOBS_TEST" not in proc.stderr


def test_version_prints_the_package_version_and_the_schema_it_installs():
    import importlib.metadata

    import xjobs
    from xjobs.drivers.sql import SCHEMA_VERSION
    # one version: the installed distribution's metadata is read from xjobs.__version__
    assert importlib.metadata.version("xjobsd") == xjobs.__version__
    proc = subprocess.run([sys.executable, "-m", "xjobs.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc
    assert proc.stdout == f"xjobsd {xjobs.__version__} (schema {SCHEMA_VERSION})\n", proc


def test_a_reader_that_stops_early_gets_no_traceback(pg_dsn, pg_schema):
    # a table of 1,000 rows is far more than a pipe holds, printed row by row: the writer is
    # still writing when the reader goes away after one line
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    driver.migrate()
    from xjobs.drivers.base import NewJob
    driver.job_enqueue([NewJob(name="greet", queue="mail", payload=b"{}", idempotency_key=f"key-{n:0>100}")
                        for n in range(1000)])
    driver.close()
    env = {**os.environ, "XJOBS_DATABASE_URL": pg_dsn, "XJOBS_SCHEMA": pg_schema}
    proc = subprocess.Popen([sys.executable, "-m", "xjobs.cli", "jobs", "ls", "--limit", "1000"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().split()[:2] == [b"ID", b"NAME"]  # type: ignore[union-attr]
        proc.stdout.close()  # type: ignore[union-attr]  # as `| head -1` does once it has its line
        code = proc.wait(60)
        stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
    assert stderr == ""   # neither a BrokenPipeError traceback nor "Exception ignored"
    assert code == 141    # what the shell reports for any tool a closed pipe stopped


def test_tasks_ls_shows_each_task_its_next_fire_its_watermark_and_the_leader(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    before = as_json(xjobsd("tasks", "ls", "--app", "tests.apps.coord_app", "--json"))
    assert before["leader"] is None
    [task] = before["tasks"]
    assert (task["name"], task["cron"], task["tz"], task["job"], task["catch_up"], task["watermark"]) == \
        ("every_second", "* * * * * *", "UTC", "beat", "run-all", None)
    datetime.fromisoformat(task["next_fire"])

    import tests.apps.coord_app  # noqa: F401  (declares the task in this process too)
    from xjobs import REGISTRY
    from xjobs.workers.scheduler import Scheduler
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    try:
        scheduler = Scheduler(driver=driver, registry=REGISTRY, identity="scheduler-1", holder="daemon-1")
        scheduler.initialize()
        assert scheduler.tick().leader
        after = as_json(xjobsd("tasks", "ls", "--app", "tests.apps.coord_app", "--json"))
        assert (after["leader"]["holder"], after["leader"]["live"]) == ("daemon-1", True)
        [task] = after["tasks"]
        assert task["watermark"] is not None and task["next_fire"] > task["watermark"]
        table = xjobsd("tasks", "ls", "--app", "tests.apps.coord_app").stdout
        assert "every_second" in table and "leader: daemon-1 (leading" in table
    finally:
        driver.close()
