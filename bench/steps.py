"""Step jobs against no-step jobs, drained in the same run: in this process and through ``xjobsd``.

Every round drains ``--jobs`` no-op jobs and as many jobs of three ``ctx.step.run`` each (the
step bodies return a number), by

* a ``QueueWorker`` in this process (``--concurrency`` slots; ``def`` bodies, then ``async def``), and
* ``xjobsd run`` as a subprocess (``--queue`` shape; ``noop`` on queue ``bench`` and
  ``three_steps`` on queue ``steps``, ``bench/noop_app.py``), timed on the server's clock.

The ratio is the 3-step rate over the no-step rate of the same round and host. stmts/job is
what the server ran per job (``pg_stat_statements`` calls, else committed transactions,
server-wide: run it on a quiet machine); WAL B/job likewise. step stmts/job (in process only)
is counted in the worker: the statements its runs' steps made on the steps' pool, whatever
else the server ran meanwhile. The load average is printed
with the table: on a shared machine, compare the ratios, not the rates.

    python bench/steps.py [--jobs 20000] [--rounds 3] [--concurrency 256] [--queue 256] [--dsn ...]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from typing import Any

import psycopg

import xjobs
from daemon import Daemon, ServerWork, drain_seconds, drop_schema, enqueue_noops, fresh_schema, wait_drained
from throughput import bench_queue
from xjobs.drivers.pg_database import PgDatabase
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many


def daemon_steps(dsn: str, jobs: int, shape: str, *, steps: bool) -> tuple[float, float, float, float]:
    """(jobs/s, statements per job, WAL bytes per job) of ``xjobsd --queue <queue>=<shape>``
    draining ``jobs`` no-op jobs (queue ``bench``) or 3-step jobs (queue ``steps``)."""
    import noop_app   # the bench app, on sys.path beside this file
    schema = fresh_schema(dsn)
    try:
        if steps:
            driver = PostgresDriver(dsn, schema=schema)
            try:
                for start in range(0, jobs, 10_000):
                    enqueue_many(noop_app.three_steps, list(range(start, min(jobs, start + 10_000))),
                                 driver=driver)
            finally:
                driver.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"analyze {schema}.jobs")
        else:
            enqueue_noops(dsn, schema, jobs)
        before = ServerWork.read(dsn)
        with Daemon(dsn, schema, [f"{'steps' if steps else 'bench'}={shape}"]):
            wait_drained(dsn, schema)
        after = ServerWork.read(dsn)
        wal, statements = after.since(dsn, before)
        return jobs / drain_seconds(dsn, schema, jobs), statements / jobs, wal / jobs, math.nan
    finally:
        drop_schema(dsn, schema)


def in_process(dsn: str, jobs: int, concurrency: int, *, steps: bool,
               is_async: bool = False) -> tuple[float, float, float, float]:
    """(jobs/s, statements per job, WAL bytes per job, step statements per job) of a
    ``QueueWorker`` in this process; the step statements are counted here, on the steps' pool."""
    counted = [0]
    original = PgDatabase.step_cursor

    def step_cursor(self: PgDatabase) -> Any:
        counted[0] += 1
        return original(self)

    PgDatabase.step_cursor = step_cursor   # type: ignore[method-assign]
    try:
        before = ServerWork.read(dsn)
        _, rate, _, wal_per_job = bench_queue(dsn, jobs, concurrency, is_async=is_async, steps=3 if steps else 0)
        _, statements = ServerWork.read(dsn).since(dsn, before)
    finally:
        PgDatabase.step_cursor = original   # type: ignore[method-assign]
    return rate, statements / jobs, wal_per_job, counted[0] / jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=256, help="slots of the in-process worker")
    parser.add_argument("--queue", default="256", help="the xjobsd shape of both queues (256, 2x128, ...)")
    parser.add_argument("--no-daemon", action="store_true", help="the in-process rows only")
    args = parser.parse_args()
    xjobs.configure(dsn=args.dsn)
    hosts = [("in-process worker, def", lambda steps: in_process(args.dsn, args.jobs, args.concurrency, steps=steps)),
             ("in-process worker, async", lambda steps: in_process(args.dsn, args.jobs, args.concurrency,
                                                                   steps=steps, is_async=True))]
    if not args.no_daemon:
        hosts.append((f"xjobsd --queue <q>={args.queue}",
                      lambda steps: daemon_steps(args.dsn, args.jobs, args.queue, steps=steps)))
    rows: dict[tuple[str, bool], list[tuple[float, float, float, float]]] = {}
    ratios: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for host, drain in hosts:
            plain, stepped = drain(False), drain(True)
            rows.setdefault((host, False), []).append(plain)
            rows.setdefault((host, True), []).append(stepped)
            ratios.setdefault(host, []).append(stepped[0] / plain[0])
        loads.append(os.getloadavg()[0])

    med = statistics.median
    print(f"\n{args.jobs:,} jobs per drain, {args.rounds} rounds (median), {os.cpu_count()} cores, "
          f"load average {min(loads):.1f}-{max(loads):.1f} over the run")
    print(f"{'drain':<48}{'jobs/s':>9}{'ratio':>7}{'stmts/job':>11}{'WAL B/job':>11}"
          f"{'step stmts/job':>16}   per round")
    for host, _ in hosts:
        for steps in (False, True):
            got = rows[(host, steps)]
            ratio = f"{med(ratios[host]):.2f}" if steps else "1.00"
            print(f"{host + (', 3 steps' if steps else ', no steps'):<48}{med(g[0] for g in got):>9,.0f}"
                  f"{ratio:>7}{med(g[1] for g in got):>11.2f}{med(g[2] for g in got):>11,.0f}"
                  f"{_figure(med(g[3] for g in got)):>16}   "
                  + ", ".join(f"{g[0]:,.0f}" for g in got))
        print(f"  ratio per round: {', '.join(f'{r:.2f}' for r in ratios[host])}")
    return 0


def _figure(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
