"""A transaction held open for minutes while ``xjobsd`` runs at half load: what it does to the
throughput, the pickup and the hot table.

A session that stays in one transaction (an analyst's ``psql``, a stuck migration, a replica
with ``hot_standby_feedback``) pins the vacuum horizon: no row version that died after it
began can be removed, so every claim and every completion leaves a dead version behind in
the heap and in each index it touched, and the claim's walk of the ready index steps over
them. This runs the daemon at half of what it drains flat out (measured first, or
``--load``), with pings timed through an idle queue beside it as ``pickup.py`` times them,
and every ``--every`` seconds reads:

* the completions in the interval: what the feeder enqueued minus the change in live rows
  (ready and running, counted in their partial indexes: cheap while the backlog is small, a
  walk of the ready index once per reading when millions wait);
* the pings' enqueue-to-start p50 and p99;
* the ``jobs`` table: heap and index bytes, the ready index alone, the live and dead row
  versions by the statistics collector, and how many transactions the horizon is behind.

Three phases: ``--before`` seconds, the transaction held for ``--hold-minutes``, then
``--after`` seconds with it gone, so what autovacuum gets back shows.

    python bench/held_xmin.py [--hold-minutes 10] [--before 60] [--after 180] [--queue bench=256]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from daemon import Daemon, daemon_drain, drop_schema, fresh_schema, percentile
from pickup import _feed
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many

MIB = 1024.0 * 1024.0


@dataclass
class Reading:
    at: float                 # seconds since the start of the first phase
    phase: str
    completed_per_s: float
    live: int                 # ready and running rows
    pickups: list[float]      # ms
    heap_mib: float
    indexes_mib: float
    ready_index_mib: float
    dead: int
    horizon_age: int          # transactions the oldest snapshot is behind (0: none held)


def _table(conn: psycopg.Connection[Any], schema: str) -> tuple[int, float, float, float, int, int]:
    """(live rows, heap MiB, indexes MiB, ready index MiB, dead versions, horizon age)."""
    conn.execute("select pg_stat_clear_snapshot()")
    row = conn.execute(
        f"""select (select count(*) from {schema}.jobs where state = 'ready')
                   + (select count(*) from {schema}.jobs where state = 'running'),
                   pg_relation_size('{schema}.jobs'), pg_indexes_size('{schema}.jobs'),
                   pg_relation_size('{schema}.jobs_ready_idx'),
                   coalesce((select n_dead_tup from pg_stat_user_tables
                              where schemaname = %s and relname = 'jobs'), 0),
                   coalesce((select max(age(backend_xmin)) from pg_stat_activity
                              where backend_xmin is not null and pid <> pg_backend_pid()), 0)""",
        (schema,)).fetchone()
    assert row is not None
    live, heap, indexes, ready, dead, age = row
    return int(live), heap / MIB, indexes / MIB, ready / MIB, int(dead), int(age)


def _ping(driver: PostgresDriver, sock: Any, n: int) -> float:
    import noop_app
    sent = time.monotonic()
    enqueue_many(noop_app.ping, [n], driver=driver)
    return (noop_app.started(sock, n) - sent) * 1000.0


def run(dsn: str, *, queue: str, load: float, before: float, hold: float, after: float,
        every: float) -> list[Reading]:
    import noop_app
    schema = fresh_schema(dsn)
    spawn = multiprocessing.get_context("spawn")
    stop, fed = spawn.Event(), spawn.Value("q", 0)
    feeder = spawn.Process(target=_feed, args=(dsn, schema, load, stop, fed), daemon=True)
    readings: list[Reading] = []
    holder: psycopg.Connection[Any] | None = None
    try:
        with noop_app.pings() as sock, psycopg.connect(dsn, autocommit=True) as stats, \
                Daemon(dsn, schema, ["idle=1x4", queue]) as daemon:
            driver = PostgresDriver(dsn, schema=schema)
            daemon.wait_ready()
            feeder.start()
            started = time.monotonic()
            phases = [("before", before), ("held", hold), ("after", after)]
            ends = [sum(length for _, length in phases[:i + 1]) for i in range(len(phases))]
            last_at, last_done, n = started, 0, int(time.time() * 1000)
            for (phase, _), end in zip(phases, ends):
                if phase == "held":
                    holder = psycopg.connect(dsn)
                    holder.execute("set transaction isolation level repeatable read")
                    holder.execute("select txid_current(), count(*) from pg_class").fetchone()
                if phase == "after" and holder is not None:
                    holder.commit()
                    holder.close()
                    holder = None
                while time.monotonic() - started < end - 1e-6:
                    pings: list[float] = []
                    until = min(started + end, time.monotonic() + every)
                    while time.monotonic() < until:
                        n += 1
                        pings.append(_ping(driver, sock, n))
                        time.sleep(0.05)
                    live, heap, indexes, ready, dead, age = _table(stats, schema)
                    now = time.monotonic()
                    done = fed.value - live
                    readings.append(Reading(now - started, phase, (done - last_done) / (now - last_at), live,
                                            pings, heap, indexes, ready, dead, age))
                    print(_line(readings[-1]), flush=True)
                    last_at, last_done = now, done
            driver.close()
    finally:
        stop.set()
        if feeder.pid is not None:
            feeder.join(30)
        if holder is not None:
            holder.close()
        drop_schema(dsn, schema)
    return readings


HEADER = (f"{'t (s)':>6} {'phase':<7} {'done/s':>8} {'live':>7} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'heap MiB':>9} {'idx MiB':>8} {'ready MiB':>9} {'dead':>10} {'horizon':>9}")


def _line(r: Reading) -> str:
    return (f"{r.at:>6.0f} {r.phase:<7} {r.completed_per_s:>8,.0f} {r.live:>7,} "
            f"{percentile(r.pickups, 0.5):>7.2f} {percentile(r.pickups, 0.99):>7.2f} "
            f"{r.heap_mib:>9.1f} {r.indexes_mib:>8.1f} {r.ready_index_mib:>9.2f} {r.dead:>10,} {r.horizon_age:>9,}")


def summary(readings: list[Reading], load: float) -> str:
    out = [f"\nby phase (fed at {load:,.0f} jobs/s)",
           f"{'phase':<7} {'done/s (median)':>16} {'live, max':>10} {'p50 ms':>7} {'p99 ms':>7} "
           f"{'heap+idx MiB at end':>20} {'ready idx MiB at end':>21} {'dead at end':>12}"]
    for phase in ("before", "held", "after"):
        got = [r for r in readings if r.phase == phase]
        if not got:
            continue
        pings = [ms for r in got for ms in r.pickups]
        last = got[-1]
        out.append(f"{phase:<7} {statistics.median(r.completed_per_s for r in got):>16,.0f} "
                   f"{max(r.live for r in got):>10,} {percentile(pings, 0.5):>7.2f} {percentile(pings, 0.99):>7.2f} "
                   f"{last.heap_mib + last.indexes_mib:>20.1f} {last.ready_index_mib:>21.2f} {last.dead:>12,}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--queue", default="bench=256", help="the loaded queue's shape")
    parser.add_argument("--load", type=float, default=None,
                        help="jobs/s fed to it (default: half its drain rate, measured first)")
    parser.add_argument("--before", type=float, default=60.0, help="seconds before the transaction begins")
    parser.add_argument("--hold-minutes", type=float, default=10.0, help="minutes it stays open")
    parser.add_argument("--after", type=float, default=180.0, help="seconds after it ended")
    parser.add_argument("--every", type=float, default=30.0, help="seconds per reading")
    args = parser.parse_args()
    load = args.load
    if load is None:
        load = daemon_drain(args.dsn, 50_000, [args.queue]).rate / 2
    print(f"xjobsd --queue {args.queue} fed {load:,.0f} jobs/s; a transaction held from "
          f"{args.before:.0f} s for {args.hold_minutes:g} min\n{HEADER}", flush=True)
    readings = run(args.dsn, queue=args.queue, load=load, before=args.before,
                   hold=args.hold_minutes * 60.0, after=args.after, every=args.every)
    print(summary(readings, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
