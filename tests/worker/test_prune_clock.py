"""Retention is measured on the database's clock: a worker process whose wall clock runs two
days ahead prunes nothing that is still inside the retention window."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import psycopg
import pytest

from xjobs.drivers.postgres import PostgresDriver

pytestmark = pytest.mark.postgres

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# one worker pass in a process whose time.time() is 48 hours ahead; its driver is a production
# one (no clock=), so "now" in every statement is the server's
WORKER = textwrap.dedent("""
    import sys, time
    real = time.time
    time.time = lambda: real() + 48 * 3600
    import xjobs
    from xjobs.config import Settings
    from xjobs.drivers.postgres import PostgresDriver
    from xjobs.workers.queue_worker import QueueWorker
    dsn, schema = sys.argv[1], sys.argv[2]
    registry = xjobs.Registry()
    xjobs.job(queue="q", idempotency_key=lambda i: "k", tenant="none", registry=registry)(lambda ctx, i: None)
    driver = PostgresDriver(dsn, schema=schema)
    worker = QueueWorker(driver=driver, registry=registry, queue="q", concurrency=1,
                         settings=Settings(retention_completed_ms="1d", retention_finished_ms="14d"))
    worker.initialize()
    worker.run_once(worker.clock())   # the first pass sweeps and prunes
    worker.close()
    print("ahead by", round((time.time() - real()) / 3600), "hours")
""")


def test_a_worker_whose_clock_runs_two_days_ahead_prunes_only_what_the_database_says_is_old(pg_dsn, pg_schema):
    driver = PostgresDriver(pg_dsn, schema=pg_schema, application_name="xjobs-tests")
    driver.migrate()
    driver.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for state, age in (("completed", "1 hour"), ("completed", "25 hours"), ("dead", "2 days"),
                           ("dead", "15 days")):
            conn.execute(
                f"insert into {pg_schema}.jobs (name, queue, state, payload, idempotency_key, max_attempts, "
                f"run_at, created_at, finished_at) values ('j', 'q', %s, '{{}}', %s, 1, now(), now(), "
                f"now() - %s::interval)", (state, f"{state}:{age}", age))
    done = subprocess.run([sys.executable, "-c", WORKER, pg_dsn, pg_schema], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "ahead by 48 hours" in done.stdout
    with psycopg.connect(pg_dsn) as conn:
        left = sorted(k for (k,) in conn.execute(f"select idempotency_key from {pg_schema}.jobs"))
    # inside the window (1 h completed, 2 d dead) stays; only what the database's clock calls old goes
    assert left == ["completed:1 hour", "dead:2 days"]
