"""Queue control and bulk verbs as an operator types them: ``xjobsd queues`` and the filtered,
batched ``xjobsd jobs retry|cancel``; ``jobs ls`` filters and ``--follow``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import orjson
import psycopg
import pytest

from tests.cli.commands import ROOT, as_json
from xjobs.drivers.base import Claim, NewJob
from xjobs.drivers.postgres import PostgresDriver

pytestmark = pytest.mark.postgres


@pytest.fixture
def driver(pg_dsn, pg_schema):
    d = PostgresDriver(pg_dsn, schema=pg_schema, application_name="xjobs-tests")
    d.migrate()
    yield d
    d.close()


def _dead_jobs(pg_dsn: str, schema: str, count: int, name: str = "send", error: str = "boom") -> None:
    """``count`` dead letters in one statement, as a long outage leaves them."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, max_attempts, "
            f"attempt, run_at, created_at, finished_at, last_error) "
            f"select %s, 'mail', 'dead', '{{}}', %s || n, 3, 3, now(), now(), now(), %s "
            f"from generate_series(1, %s) n", (name, name, error, count))


def test_a_bulk_retry_of_ten_thousand_dead_jobs_goes_in_bounded_batches(xjobsd, driver, pg_dsn, pg_schema):
    _dead_jobs(pg_dsn, pg_schema, 10_000)
    _dead_jobs(pg_dsn, pg_schema, 5, name="other", error="HTTP 404")
    xjobsd("jobs", "retry", "--json", expect=2)                        # no filter, no --all: refused
    dry = as_json(xjobsd("jobs", "retry", "--state", "dead", "--name", "send", "--dry-run", "--json"))
    assert (dry["matched"], dry["changed"], dry["dry_run"]) == (10_000, 0, True)
    assert driver.job_stats()["mail"] == {"dead": 10_005}
    done = as_json(xjobsd("jobs", "retry", "--state", "dead", "--error-contains", "BOOM", "--json"))
    assert (done["changed"], done["batches"], done["skipped"]) == (10_000, 10, 0)
    assert driver.job_stats()["mail"] == {"ready": 10_000, "dead": 5}
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"select count(*) from {pg_schema}.job_history where outcome = 'requeued' "  # type: ignore[index]
                            f"and error like 'retried by cli:%%'").fetchone()[0] == 10_000
    out = xjobsd("jobs", "cancel", "--name", "send", "--queue", "mail").stdout
    assert out.strip() == "10000 job(s) cancelled in 10 batch(es)"
    assert driver.job_stats()["mail"] == {"cancelled": 10_000, "dead": 5}


def test_queues_pause_resume_and_list(xjobsd, driver):
    driver.job_enqueue([NewJob(name="n", queue="mail", payload=b"{}", idempotency_key="k")])
    paused = xjobsd("queues", "pause", "mail").stdout
    assert paused.startswith("queue mail paused fleet-wide by cli:")
    assert driver.job_claim(Claim(["mail"], 10, 30_000, "w")) == []
    [row] = as_json(xjobsd("queues", "ls", "--json"))
    assert (row["name"], row["paused"], row["depth"]) == ("mail", True, 1)
    assert row["changed_at"].endswith("+00:00")                  # a time, as every --json prints one
    assert "paused by cli:" in xjobsd("queues", "ls").stdout
    xjobsd("queues", "resume", "mail")
    assert [j.queue for j in driver.job_claim(Claim(["mail"], 10, 30_000, "w"))] == ["mail"]
    xjobsd("queues", "pause", "bad\nname", expect=2)


def test_jobs_ls_filters_and_follows(xjobsd, driver, pg_dsn, pg_schema):
    _dead_jobs(pg_dsn, pg_schema, 2, name="old", error="Timeout talking to the bank")
    driver.job_enqueue([NewJob(name="new", queue="mail", payload=b"{}", idempotency_key="a", tenant="t1")])
    assert [j["name"] for j in as_json(xjobsd("jobs", "ls", "--tenant", "t1", "--json"))] == ["new"]
    assert len(as_json(xjobsd("jobs", "ls", "--error-contains", "bank", "--json"))) == 2
    assert len(as_json(xjobsd("jobs", "ls", "--since", "1h", "--json"))) == 3
    assert as_json(xjobsd("jobs", "ls", "--until", "2000-01-01T00:00Z", "--json")) == []
    xjobsd("jobs", "ls", "--since", "yesterday", expect=2)

    env = {**os.environ, "XJOBS_DATABASE_URL": pg_dsn, "XJOBS_SCHEMA": pg_schema}
    follow = subprocess.Popen([sys.executable, "-m", "xjobs.cli", "jobs", "ls", "--follow", "--json",
                               "--queue", "mail"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        seen = [orjson.loads(follow.stdout.readline())["name"] for _ in range(3)]  # type: ignore[union-attr]
        assert seen == ["old", "old", "new"]                      # the newest page, oldest first
        driver.job_enqueue([NewJob(name="newer", queue="mail", payload=b"{}", idempotency_key="b")])
        assert orjson.loads(follow.stdout.readline())["name"] == "newer"  # type: ignore[union-attr]
    finally:
        follow.send_signal(signal.SIGINT)
        assert follow.wait(10) == 0
