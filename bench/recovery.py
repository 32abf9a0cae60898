"""How long jobs caught in a worker-process crash take to come back, through ``xjobsd``.

A queue's one worker process runs N jobs of S seconds each; once every body has started, the
process is SIGKILLed, and the time from the kill to the last job's completion is measured.
The crashed process's jobs are crash suspects: they run again in halves, apart from other
work (``workers/quarantine.py``), so the innocent ones finish in about two rounds of S on one
process instead of N runs in a row. Each row is the median (and range) of ``--rounds`` kills,
printed beside the two references a reader needs: one round (S: the jobs as if nothing had
happened) and running them one at a time (N x S).

    python bench/recovery.py [--dsn URL] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

import psycopg

from daemon import Daemon, drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.control_client import request

SCENARIOS = [(4, 3.0, "nap=1x4"), (128, 1.0, "nap=1x128")]


def _count(conn: psycopg.Connection, sql: str, *params: object) -> int:
    row = conn.execute(sql, params or None).fetchone()
    assert row is not None
    return int(row[0])


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def one_kill(dsn: str, jobs: int, seconds: float, queue: str) -> float:
    """Seconds from the SIGKILL of the worker running ``jobs`` naps to the last one's completion."""
    schema = fresh_schema(dsn)
    try:
        with Daemon(dsn, schema, [queue]) as daemon:
            daemon.wait_ready()
            import noop_app
            driver = PostgresDriver(dsn, schema=schema)
            try:
                enqueue_many(noop_app.nap, [{"n": n, "s": seconds} for n in range(jobs)], driver=driver)
            finally:
                driver.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                running = f"select count(*) from {schema}.jobs where state = 'running'"
                _wait(lambda: _count(conn, running) == jobs, 60, f"{jobs} jobs to run")
                time.sleep(0.2)     # every body has begun its nap
                [worker] = [c["pid"] for c in request(daemon.control, "status")["children"]
                            if c["role"] == "worker"]
                killed = time.monotonic()
                os.kill(worker, signal.SIGKILL)
                left = f"select count(*) from {schema}.jobs where state <> 'completed'"
                _wait(lambda: _count(conn, left) == 0, 30 + jobs * seconds * 2, "every job to complete")
                took = time.monotonic() - killed
                charged = _count(conn, f"select count(*) from {schema}.jobs where attempt > 1")
                if charged:
                    raise RuntimeError(f"{charged} innocent job(s) charged an attempt")
                return took
    finally:
        drop_schema(dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"{'shape':<12} {'jobs':>5} {'each':>6} {'recovered in (median, min-max)':>32} "
          f"{'one round':>10} {'one at a time':>14}")
    for jobs, seconds, queue in SCENARIOS:
        took = [one_kill(args.dsn, jobs, seconds, queue) for _ in range(args.rounds)]
        print(f"{queue.split('=')[1]:<12} {jobs:>5} {seconds:>5.1f}s "
              f"{statistics.median(took):>14.2f}s ({min(took):.2f}-{max(took):.2f}s)     "
              f"{seconds:>9.1f}s {jobs * seconds:>13.1f}s", flush=True)


if __name__ == "__main__":
    main()
