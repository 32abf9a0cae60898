"""Where does one database saturate? K ``xjobsd`` supervisors against ONE database and ONE
schema, each serving the same queue shape, drain N no-op jobs; one table row per K.

For each K (``--k 1,2,4``) in a fresh schema: enqueue N ``noop`` jobs (bench/noop_app.py, queue
``bench``), pause the queue, start K ``xjobsd run --queue bench=PxC`` subprocesses (each with its
own control socket and ``--metrics off``), wait until every child of every daemon is ready,
resume the queue and wait for the drain. Pausing first means every row is drained by all K
daemons: none gets a head start while the others are still forking.

Columns:

- ``jobs/s``: N over the drain, timed on the database's clock from the first job's
  ``started_at`` to the last job's ``finished_at`` (as ``daemon.py`` times one daemon).
  ``vs K=1`` is that rate over the first row's (the first K given).
- ``db CPU``: user+system CPU of the PostgreSQL server (its postmaster, found as the parent of
  our own backend, and every process it forked whose command line starts with "postgres",
  plus the backends that exited meanwhile, which the postmaster has reaped) from just before
  the resume to the end of the drain, over that wall time and over ``os.cpu_count()``: 100 %
  is every core of this machine busy. It is read from ``/proc``, so it assumes the server runs
  on THIS machine (as it does on the benchmark machines); when the server's processes are not
  visible here (a remote server, another PID namespace) it prints ``n/a``.
- ``xjobsd CPU``: the same for every process of the K daemons (supervisors and children).
- ``WAL B/job``: the server's WAL bytes during the drain (``ServerWork``), per job. (Its
  statement count is left out: without pg_stat_statements it comes from pg_stat_database,
  whose counters a busy session publishes at most once a second on PostgreSQL 15 and later,
  so a drain of a few seconds reads too few.)

How to read it: while jobs/s grows with K, the database still has room. Where jobs/s stops
growing while ``db CPU`` keeps rising, PostgreSQL is the limit. If instead ``db CPU`` plus
``xjobsd CPU`` is near 100 %, the MACHINE is the limit: here the daemons share the server's
cores, where a real fleet would run them on other machines. The WAL and CPU figures are
server-wide, so run this on a quiet server; WAL per job should not change with K.

    python bench/fleet.py [--k 1,2,4] [--jobs 100000] [--queue bench=2x128] [--dsn ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

from daemon import Daemon, ServerWork, drain_seconds, drop_schema, enqueue_noops, fresh_schema, proc_title, wait_drained
from xjobs.drivers.postgres import PostgresDriver

TICK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first), or [] when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of ``pid`` (the last two: its children it has reaped)."""
    return sum(int(f) for f in _stat(pid)[11:15])


def _is_postgres(pid: int) -> bool:
    """Backends' titles start with "postgres:"; the postmaster's argv[0] is its binary's path."""
    argv0 = proc_title(pid)
    return argv0 is not None and (argv0.startswith("postgres") or os.path.basename(argv0) == "postgres")


def find_postmaster(dsn: str) -> int | None:
    """The pid of the server's postmaster when its processes are visible from here: the parent
    of our own backend. None for a remote server or one in another PID namespace."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        backend = conn.execute("select pg_backend_pid()").fetchone()[0]   # type: ignore[index]
        fields = _stat(backend) if _is_postgres(backend) else []
    return int(fields[1]) if fields and _is_postgres(int(fields[1])) else None


def server_pids(postmaster: int) -> list[int]:
    """The postmaster and every process it forked (backends, auxiliaries, parallel workers);
    other PostgreSQL servers on the machine are not counted."""
    kids = [int(e.name) for e in Path("/proc").iterdir()
            if e.name.isdigit() and (f := _stat(int(e.name))) and int(f[1]) == postmaster]
    return [postmaster, *(pid for pid in kids if _is_postgres(pid))]


@dataclass
class Row:
    k: int
    seconds: float
    db_cpu: float | None
    xjobsd_cpu: float
    wal_per_job: float


def fleet_drain(dsn: str, k: int, jobs: int, queue: str, postmaster: int | None) -> Row:
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema)
    daemons: list[Daemon] = []
    try:
        enqueue_noops(dsn, schema, jobs)
        driver.queue_pause("bench", True, by="bench/fleet.py")
        daemons = [Daemon(dsn, schema, [queue]) for _ in range(k)]
        for daemon in daemons:
            daemon.wait_ready(timeout=60)
        ours = [pid for daemon in daemons for pid in daemon.pids().values()]
        work_before = ServerWork.read(dsn)
        db_before = sum(map(_ticks, server_pids(postmaster))) if postmaster else 0
        ours_before, wall_before = sum(map(_ticks, ours)), time.monotonic()
        driver.queue_pause("bench", False, by="bench/fleet.py")   # wakes the idle workers at once
        wait_drained(dsn, schema)
        wall = time.monotonic() - wall_before
        db_ticks = sum(map(_ticks, server_pids(postmaster))) - db_before if postmaster else None
        ours_ticks = sum(map(_ticks, ours)) - ours_before
        work_after = ServerWork.read(dsn)
        seconds = drain_seconds(dsn, schema, jobs)
        wal, _ = work_after.since(dsn, work_before)

        def share(ticks: int) -> float:
            return ticks / TICK / wall / CPUS

        return Row(k, seconds, None if db_ticks is None else share(db_ticks),
                   share(ours_ticks), wal / jobs)
    finally:
        for daemon in daemons:
            daemon.stop()
        driver.close()
        drop_schema(dsn, schema)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--k", default="1,2,4", help="supervisor counts, comma-separated (default 1,2,4)")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--queue", default="bench=2x128", help="each supervisor's --queue (default bench=2x128)")
    args = parser.parse_args()
    counts = [int(k) for k in args.k.split(",") if k.strip()]
    if not counts or min(counts) < 1 or args.jobs < 1 or not args.queue.startswith("bench="):
        parser.error("--k takes positive counts, --jobs a positive count, --queue bench=PROCSxCONC")

    postmaster = find_postmaster(args.dsn)
    rows = []
    for k in counts:
        rows.append(fleet_drain(args.dsn, k, args.jobs, args.queue, postmaster))
        print(f"K={k}: {args.jobs / rows[-1].seconds:,.0f} jobs/s", file=sys.stderr, flush=True)

    print(f"\n{args.jobs:,} no-op jobs drained by K xjobsd supervisors, each --queue {args.queue}, "
          f"one database, one schema; CPU as a share of this machine's {CPUS} cores")
    print(f"{'K':>3} {'drain s':>8} {'jobs/s':>9} {f'vs K={counts[0]}':>7} {'db CPU':>7} {'xjobsd CPU':>11} "
          f"{'WAL B/job':>10}")
    base = args.jobs / rows[0].seconds
    for row in rows:
        rate = args.jobs / row.seconds
        db = "n/a" if row.db_cpu is None else f"{row.db_cpu:.0%}"
        print(f"{row.k:>3} {row.seconds:>8.2f} {rate:>9,.0f} {rate / base:>7.2f} {db:>7} "
              f"{row.xjobsd_cpu:>11.0%} {row.wal_per_job:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
