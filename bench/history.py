"""Is a drain flat with history? The same no-op drain through ``xjobsd``, and the same idle
pickup, on an empty table and on one holding N finished rows (10,000,000 by default), in one
run.

The finished rows are loaded with one ``INSERT ... SELECT`` (completed, dead and cancelled, a
year of ``finished_at``, as retention would keep them), then the table is vacuumed and
analyzed, as autovacuum would have done long before a real table grew that large, and a
checkpoint is taken so the drains do not pay for the load's.

    python bench/history.py [--finished 10000000] [--jobs 100000] [--queue bench=3x256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import psycopg

from daemon import daemon_drain, drop_schema, fresh_schema, percentile
from pickup import daemon_pickup


def load_finished(dsn: str, schema: str, rows: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority,
                                      attempt, max_attempts, run_at, created_at, started_at, finished_at,
                                      last_error)
            select 'noop', 'bench', s, jsonb_build_object('n', g), 'old-' || g, 'none', 0, 1, 5, t, t, t, t,
                   case when s = 'completed' then null else 'boom' end
            from generate_series(1, %s) g,
                 lateral (select case when g %% 50 = 0 then 'dead' when g %% 97 = 0 then 'cancelled'
                                      else 'completed' end as s,
                                 now() - (g %% 525600) * interval '1 minute' as t) x""", (rows,))
        conn.execute(f"vacuum analyze {schema}.jobs")
        # the load wrote gigabytes of WAL: let its checkpoint finish now, or the drains that
        # follow pay its full-page writes and I/O and measure the load, not the table
        conn.execute("checkpoint")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--finished", type=int, default=10_000_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queue", default="bench=3x256")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    empty, full = fresh_schema(args.dsn), fresh_schema(args.dsn)
    try:
        loaded = load_finished(args.dsn, full, args.finished)
        print(f"loaded {args.finished:,} finished rows in {loaded:.0f} s", flush=True)
        rates: dict[str, list[float]] = {empty: [], full: []}
        pickups: dict[str, list[float]] = {empty: [], full: []}
        for _ in range(args.rounds):     # interleaved, so a slow minute hurts both alike
            for schema in (empty, full):
                rates[schema].append(daemon_drain(args.dsn, args.jobs, [args.queue], schema=schema).rate)
                with psycopg.connect(args.dsn, autocommit=True) as conn:
                    conn.execute(f"vacuum {schema}.jobs")   # what autovacuum does between bursts
                pickups[schema] += daemon_pickup(args.dsn, 40, schema=schema)
    finally:
        drop_schema(args.dsn, empty)
        drop_schema(args.dsn, full)

    print(f"\n{args.jobs:,} no-op jobs through xjobsd --queue {args.queue}, median of {args.rounds} rounds")
    print(f"{'table':<28} {'drain jobs/s':>13} {'vs empty':>9} {'pickup p50 ms':>14} {'p99 ms':>7}")
    base = statistics.median(rates[empty])
    for label, schema in (("empty", empty), (f"{args.finished:,} finished rows", full)):
        rate = statistics.median(rates[schema])
        print(f"{label:<28} {rate:>13,.0f} {rate / base:>9.2f} {percentile(pickups[schema], 0.5):>14.2f} "
              f"{percentile(pickups[schema], 0.99):>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
