"""What a job's row costs while it runs (schema 17): a lease renewal and a progress report touch
no indexed column, so each can be a HOT update on the row's own page; and the reads that used
the re-keyed running index stay on it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.drivers.parity import run
from xjobs.drivers.base import Lease
from xjobs.drivers.sql import statements

pytestmark = pytest.mark.postgres

# the columns a running job's row changes while it runs: job_renew_many, job_progress_many
_WRITTEN_WHILE_RUNNING = ("lease_expires_at", "progress")


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node] + [n for child in node.get("Plans", ()) for n in _plan_nodes(child)]


def _scans(conn: Any, sql: str, params: dict[str, Any]) -> set[tuple[str, str | None]]:
    """(node type, index) of every scan of ``jobs`` in the statement's plan."""
    [[plan]] = conn.execute("explain (format json) " + sql, params).fetchone()
    return {(n["Node Type"], n.get("Index Name")) for n in _plan_nodes(plan["Plan"])
            if "Scan" in n["Node Type"]
            and (n.get("Relation Name") == "jobs" or str(n.get("Index Name")).startswith("jobs_"))}


def test_no_index_of_jobs_reads_a_column_a_running_job_writes(pg_driver):
    with pg_driver.connect() as conn:
        defs = [r[0] for r in conn.execute("select indexdef from pg_indexes where schemaname = %s "
                                           "and tablename = 'jobs'", (pg_driver.schema,)).fetchall()]
    assert defs
    # in a key, an expression or a predicate, any of them makes every such update non-HOT
    found = [d for d in defs for col in _WRITTEN_WHILE_RUNNING if re.search(rf"\b{col}\b", d)]
    assert found == []


def test_a_renewal_and_a_progress_report_are_hot_updates(pg_driver):
    job_id, lease = run(pg_driver)
    sql = statements(pg_driver.schema, server_clock=True)
    with pg_driver.connect() as conn, conn.transaction():
        # counted by this transaction alone: pg_stat_get_xact_* needs no statistics flush
        renewed = conn.execute(sql["job_renew_many"], {"lease": 30_000, "ids": [job_id],
                                                       "tokens": [lease.token]}).fetchall()
        reported = conn.execute(sql["job_progress_many"], {
            "rows": f'[{{"id": {job_id}, "token": {lease.token}, "p": {{"done": 1}}}}]'}).fetchall()
        row = conn.execute("select pg_stat_get_xact_tuples_updated(%s::regclass), "
                           "pg_stat_get_xact_tuples_hot_updated(%s::regclass)",
                           (f"{pg_driver.schema}.jobs",) * 2).fetchone()
    assert (renewed, reported) == ([(job_id,)], [(job_id,)])
    assert row == (2, 2)
    assert pg_driver.job_renew_many([Lease(job_id, lease.token)], 30_000) == {job_id}


def test_the_running_reads_stay_on_the_running_index(pg_driver):
    schema = pg_driver.schema
    with pg_driver.connect() as conn:
        # finished rows and a ready backlog around a few running jobs: a plan that does not
        # find the running rows by their index reads one of the others
        conn.execute(f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, max_attempts, "
                     f"run_at, created_at, finished_at) select 'n', 'q', case when i % 4 = 0 then 'ready' "
                     f"else 'completed' end, '{{}}', 'k' || i, 1, now(), now(), now() "
                     f"from generate_series(1, 20000) as i")
        conn.execute(f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, max_attempts, "
                     f"run_at, created_at, claimed_by, lease_expires_at, lease_token) select 'n', 'q', 'running', "
                     f"'{{}}', 'r' || i, 1, now(), now(), 'w' || (i % 20), now(), i from generate_series(1, 200) as i")
        conn.execute(f"analyze {schema}.jobs")
        sql = statements(schema, server_clock=True)
        release = _scans(conn, sql["job_release_worker"], {
            "worker": "w1", "crashed": True, "charge": "alone", "how": "killed"})
        rescue = _scans(conn, sql["job_rescue_lapsed"], {"limit": 100})
        listing = _scans(conn, sql["job_running"], {"queue": None, "started_before": None, "before": None,
                                                    "limit": 50})
    for scans in (release, rescue, listing):
        assert ("Seq Scan", None) not in scans, scans
        assert any(name == "jobs_running_idx" for _, name in scans), scans
