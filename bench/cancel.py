"""How soon a running job's body sees its stop signal once an operator cancels it.

One ``stoppable`` job at a time runs on an idle ``xjobsd --queue stop=1x4`` (the lease and its
renewal at their defaults, 30 s and 10 s, unless ``--lease``/``--heartbeat`` say otherwise);
a random 0 to ``--spread`` seconds after its body reported its start (so the cancels do not all
fall at one point of the renewal cycle), the job is cancelled, and the time runs from just before the
cancel to the body's report that ``ctx.signal`` is set (``noop_app.stoppable``; the machine's
monotonic clock is one clock for every process). Two ways to cancel, one row each:

* ``admin.cancel_job`` in this process: what ``xjobsd jobs cancel ID`` and the dashboard's
  cancel call, without a process start;
* ``xjobsd jobs cancel ID`` as a subprocess: the same, plus the command's own start-up.

Against the raw loop: one session ``LISTEN``s; another updates a row and ``NOTIFY``s in one
transaction; the listener wakes and reads the row back (as a worker confirms a cancel against
the database before it acts): the least a notification-delivered cancel can take.

Bulk: ``admin.cancel_jobs`` over ``--bulk`` jobs of one queue in batches of 1,000, first while
they are ready (nobody to tell), then while they run under 8 holders (each batch tells each
holder once), with the notifications a listener on the cancel channel heard.

    python bench/cancel.py [--dsn URL] [--samples 50] [--bulk 10000] [--lease 30s --heartbeat 10s] [--spread 1]
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import subprocess
import time
from typing import Any

import psycopg

from daemon import XJOBSD, Daemon, drop_schema, fresh_schema, percentile, raw_listener
from xjobs import admin
from xjobs.drivers.base import Claim, ListFilter
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many

HOLDERS = 8


def cancel_to_signal(dsn: str, samples: int, how: str, spread_s: float, warmup: int = 3) -> list[float]:
    """Milliseconds from a cancel (``how``: "admin" or "cli") to its body seeing the signal; each
    cancel comes a random 0 to ``spread_s`` seconds after its body started (seeded)."""
    import noop_app
    pause = random.Random(7)
    schema = fresh_schema(dsn)
    env = {**os.environ, "XJOBS_DATABASE_URL": dsn, "XJOBS_SCHEMA": schema}
    with noop_app.pings() as sock:
        sock.settimeout(60)   # at most the renewal interval when nothing is notified
        driver = PostgresDriver(dsn, schema=schema)
        try:
            with Daemon(dsn, schema, ["stop=1x4"]) as daemon:
                daemon.wait_ready()
                latencies = []
                for n in range(warmup + samples):
                    [job] = enqueue_many(noop_app.stoppable, [n], driver=driver)
                    noop_app.started(sock, n)
                    time.sleep(pause.uniform(0.0, spread_s))
                    asked = time.monotonic()
                    if how == "admin":
                        admin.cancel_job(driver, job.id, by="bench")
                    else:
                        subprocess.run([XJOBSD, "jobs", "cancel", str(job.id)], env=env, check=True,
                                       stdout=subprocess.DEVNULL)
                    seen = noop_app.started(sock, f"{n}:stop")
                    if n >= warmup:
                        latencies.append((seen - asked) * 1000.0)
        finally:
            driver.close()
            drop_schema(dsn, schema)
    return latencies


def raw_notify_round_trip(dsn: str, samples: int, warmup: int = 5) -> list[float]:
    """Milliseconds from the start of a transaction that updates a row and NOTIFYs to a
    listening session having read the row back."""
    seen: queue.Queue[float] = queue.Queue()

    def read_back(conn: psycopg.Connection[Any], schema: str) -> None:
        conn.execute(f"select state from {schema}.q where id = 1").fetchone()
        seen.put(time.monotonic())
    with raw_listener(dsn, "raw_cancel", "id bigint primary key, state text not null", read_back) as schema:
        latencies = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"insert into {schema}.q values (1, 'running')")
            for n in range(warmup + samples):
                asked = time.monotonic()
                with conn.transaction():
                    conn.execute(f"update {schema}.q set state = %s where id = 1", (f"cancelled {n}",))
                    conn.execute(f"notify {schema}, '1'")
                heard = seen.get(timeout=10)
                if n >= warmup:
                    latencies.append((heard - asked) * 1000.0)
    return latencies


def bulk_cancel(dsn: str, jobs: int, running: bool) -> tuple[float, int]:
    """(ms, notifications heard) for ``cancel_jobs`` over ``jobs`` jobs of one queue, ready or
    claimed by ``HOLDERS`` holders."""
    import noop_app
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema)
    try:
        for start in range(0, jobs, 10_000):
            enqueue_many(noop_app.stoppable, list(range(start, min(jobs, start + 10_000))), driver=driver)
        if running:
            for holder in range(HOLDERS):
                share = jobs // HOLDERS + (1 if holder < jobs % HOLDERS else 0)
                while share > 0:
                    got = driver.job_claim(Claim(["stop"], min(share, 1000), 600_000.0, f"holder-{holder}"))
                    share -= len(got)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"analyze {schema}.jobs")
            conn.execute(f"listen {driver.channel}_cancel")
            began = time.perf_counter()
            result = admin.cancel_jobs(driver, ListFilter(queue="stop"), by="bench")
            took = (time.perf_counter() - began) * 1000.0
            assert result.changed == jobs, result
            heard = sum(1 for _ in conn.notifies(timeout=1.0))   # each batch's, queued at its commit
        return took, heard
    finally:
        driver.close()
        drop_schema(dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--lease", default="30s")
    parser.add_argument("--heartbeat", default="10s")
    parser.add_argument("--spread", type=float, default=1.0,
                        help="seconds: each cancel comes a random 0 to SPREAD s after its body started")
    args = parser.parse_args()
    # the daemons this process starts read them (settings with no flag of their own)
    os.environ.update(XJOBS_LEASE=args.lease, XJOBS_HEARTBEAT=args.heartbeat)

    rows = [("raw: UPDATE + NOTIFY, LISTEN + read back", raw_notify_round_trip(args.dsn, args.samples)),
            ("xjobsd: admin.cancel_job to ctx.signal", cancel_to_signal(args.dsn, args.samples, "admin", args.spread)),
            ("xjobsd: `xjobsd jobs cancel` to ctx.signal", cancel_to_signal(args.dsn, args.samples, "cli", args.spread))]
    raw = percentile(rows[0][1], 0.5)
    print(f"cancel of a running job to its body seeing ctx.signal, {args.samples} runs each, cancelled "
          f"0-{args.spread:g} s after the start; lease {args.lease}, renewal every {args.heartbeat}")
    print(f"{'cancel to signal (ms)':<46} {'p50':>9} {'p99':>9} {'max':>9} {'vs raw':>7}")
    for name, samples in rows:
        print(f"{name:<46} {percentile(samples, 0.5):>9.2f} {percentile(samples, 0.99):>9.2f} "
              f"{max(samples):>9.2f} {percentile(samples, 0.5) / raw:>7.1f}")

    if args.bulk:
        print(f"\n{f'cancel_jobs of {args.bulk:,} jobs, batches of 1,000':<46} {'ms':>9} {'notified':>9}")
        for name, running in (("ready (nobody to tell)", False), (f"running under {HOLDERS} holders", True)):
            took, heard = bulk_cancel(args.dsn, args.bulk, running)
            print(f"{name:<46} {took:>9.1f} {heard:>9}")


if __name__ == "__main__":
    main()
