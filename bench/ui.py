"""How fast does each dashboard page answer on a big table? Every page and the usual job
filters, timed in-process (request parsing, the statements, rendering) against a schema
holding N finished jobs (1,000,000 by default) and M live ones (10,000), in one run.

The finished rows are loaded with one ``INSERT ... SELECT`` (completed, with 2% dead and 1%
cancelled, a year of ``finished_at`` over 5 job names, 4 queues and 50 tenants); the live
ones are ready, running (20%, started within the last hour, each with a progress report) and
suspended; workers' per-minute counts fill the last hour. Then
the table is vacuumed and analyzed, as autovacuum would have done long before.

    python bench/ui.py [--finished 1000000] [--live 10000] [--repeat 20]

The goal: every page under 200 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from urllib.parse import parse_qsl, quote

import psycopg

from daemon import drop_schema, fresh_schema, percentile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from werkzeug.test import Client  # noqa: E402

from xjobs.drivers.postgres import PostgresDriver  # noqa: E402
from xjobs.ui.app import Dashboard  # noqa: E402
from xjobs.ui.auth import Guard  # noqa: E402

GOAL_MS = 200.0
GROUP = "TimeoutError: smtp server did not answer (attempt 3)"
# a filter no index serves that matches nothing reads every row: shown, not held to the goal
WORST = "worst: error, no match"


def load(dsn: str, schema: str, finished: int, live: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority,
                                      attempt, max_attempts, run_at, created_at, started_at, finished_at,
                                      last_error)
            select 'job' || (g %% 5), 'q' || (g %% 4), s, jsonb_build_object('n', g, 'email', 'user' || g || '@example.com'),
                   'old-' || g, 't' || (g %% 50), 0, 1, 5, t, t, t, t,
                   case s when 'dead' then 'TimeoutError: smtp server did not answer (attempt ' || (g %% 7) || ')'
                          when 'cancelled' then 'cancelled by cli:ops' end
            from generate_series(1, %s) g,
                 lateral (select case when g %% 50 = 0 then 'dead' when g %% 97 = 0 then 'cancelled'
                                      else 'completed' end as s,
                                 now() - (g %% 525600) * interval '1 minute' as t) x""", (finished,))
        conn.execute(f"""
            insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority,
                                      attempt, max_attempts, run_at, created_at, claimed_by, lease_token,
                                      lease_expires_at, started_at, progress)
            select 'job' || (g %% 5), 'q' || (g %% 4), s, jsonb_build_object('n', g), 'live-' || g,
                   't' || (g %% 50), 0, case s when 'ready' then 0 else 1 end, 5,
                   now() + case s when 'suspended' then interval '1 hour' else interval '0' end, now(),
                   case s when 'running' then 'worker:bench' end, case s when 'running' then g end,
                   case s when 'running' then now() + interval '1 hour' end,
                   case s when 'running' then now() - (g %% 3600) * interval '1 second' end,
                   case s when 'running' then jsonb_build_object('done', g %% 100, 'total', 100, 'note',
                                                                 'row ' || g, 'at', 0) end
            from generate_series(1, %s) g,
                 lateral (select case when g %% 10 < 7 then 'ready' when g %% 10 < 9 then 'running'
                                      else 'suspended' end as s) x""", (live,))
        conn.execute(f"""
            insert into {schema}.job_rates (queue, minute, outcome, n)
            select 'q' || q, date_trunc('minute', now()) - m * interval '1 minute', o, 100 + m
            from generate_series(0, 59) m, generate_series(0, 3) q,
                 unnest(array['completed', 'retried', 'dead']) o""")
        conn.execute(f"vacuum analyze {schema}.jobs")
        conn.execute("checkpoint")
    return time.perf_counter() - started


def pages(dsn: str, schema: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        dead = conn.execute(f"select max(id) from {schema}.jobs where state = 'dead'").fetchone()[0]
        newest = conn.execute(f"select max(id) from {schema}.jobs").fetchone()[0]
        started, running = conn.execute(f"""select extract(epoch from started_at)::float8 * 1000, id
                                             from {schema}.jobs where state = 'running'
                                             order by started_at desc, id desc offset 49 limit 1""").fetchone()
        conn.execute(f"""insert into {schema}.job_history (job_id, at, attempt, outcome, error, traceback)
                         select %s, now(), 1, 'dead', 'TimeoutError', repeat('  File "x.py", line 1\n', 40)""",
                     (dead,))
    return [("overview", "/"), ("jobs", "/jobs"), ("jobs, page 2", f"/jobs?before={newest - 50}"),
            ("jobs, state=dead", "/jobs?state=dead"), ("jobs, state=running", "/jobs?state=running"),
            ("jobs, queue+state", "/jobs?queue=q1&state=completed"), ("jobs, name", "/jobs?name=job3"),
            ("jobs, tenant", "/jobs?tenant=t7"), ("jobs, since 1h", "/jobs?since=1h"),
            ("jobs, error text", "/jobs?error=smtp"),
            ("jobs, state=dead+error", "/jobs?state=dead&error=attempt 3"),
            ("jobs, one dead group", "/jobs?state=dead&queue=q2&name=job0&group=" + quote(GROUP)),
            ("confirm: retry a group", "POST /bulk?verb=retry&state=dead&queue=q2&name=job0&group=" + quote(GROUP)),
            ("confirm: cancel a queue", "POST /bulk?verb=cancel&queue=q1"),
            ("running now", "/running"), ("running, page 2", f"/running?before={running}&started={started!r}"),
            ("running, queue", "/running?queue=q1"),
            ("one job", f"/jobs/{dead}"), ("dead letters", "/dead"), ("schedules", "/schedules"),
            (WORST, "/jobs?error=no such text")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    schema = fresh_schema(args.dsn)
    driver = PostgresDriver(args.dsn, schema=schema, pool_size=4, application_name="xjobs-bench-ui")
    try:
        took = load(args.dsn, schema, args.finished, args.live)
        print(f"loaded {args.finished:,} finished and {args.live:,} live jobs in {took:.1f}s (schema {schema})")
        client = Client(Dashboard(driver, guard=Guard(actions=True, token="bench")))
        rows = []
        for label, path in pages(args.dsn, schema):
            samples = []
            for _ in range(args.repeat + 2):
                began = time.perf_counter()
                if path.startswith("POST "):   # a bulk verb's first step: the count to confirm
                    target, _, form = path[5:].partition("?")
                    answer = client.post(target, data=dict(parse_qsl(form)),
                                         headers={"Authorization": "Bearer bench"})
                else:
                    answer = client.get(path)
                samples.append((time.perf_counter() - began) * 1000.0)
                assert answer.status_code == 200, (path, answer.status_code, answer.get_data(as_text=True)[:500])
            samples = samples[2:]   # the first requests prepare statements and warm the caches
            rows.append((label, path, percentile(samples, 0.5), percentile(samples, 0.95), max(samples)))
        print(f"\n{'page':<24} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  under {GOAL_MS:.0f} ms   path")
        for label, path, p50, p95, worst in rows:
            verdict = "yes" if p95 < GOAL_MS else "(worst)" if label == WORST else "NO"
            print(f"{label:<24} {p50:8.1f} {p95:8.1f} {worst:8.1f}  {verdict:<12} {path}")
        return 0 if all(p95 < GOAL_MS for label, _, _, p95, _ in rows if label != WORST) else 1
    finally:
        driver.close()
        drop_schema(args.dsn, schema)


if __name__ == "__main__":
    sys.exit(main())
