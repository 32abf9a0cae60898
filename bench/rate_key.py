"""What the fleet-wide rate gate (``job(rate=..., rate_key=...)``) costs a claim, in one run.

One session drains ``--jobs`` ready jobs in batches of ``--batch``, the way a worker does:
``job_claim``, then (for rated jobs) ``rate_take`` of the batch's starts in one statement, then
``job_ack_many``; per job, on the server's clock. The rows:

* raw: the same claim and completion as hand-written SQL on the xjobs ``jobs`` table
  (``for update skip locked``, then ``update ... where id = any(...)``), no driver;
* plain: jobs that declare no rate (the gate is not asked);
* rated, many keys: every job rated, its key one of ``--keys``, a rate no window fills;
* rated, one key: every job on one key (each take updates the same ``rate_keys`` row);
* plain beside a full key: plain jobs claimed while jobs of a key whose window is full wait
  ahead of them in the queue: 5,000 (the take that filled the window moved them all to later
  windows) and 20,000 (it moved 10,000, ``PUSH_MOST``; the claims' filter reads past the rest).

    python bench/rate_key.py [--dsn URL] [--jobs 20000] [--batch 16] [--keys 1000]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import psycopg

from daemon import drop_schema, fresh_schema
from xjobs.drivers.base import Claim, Lease, NewJob
from xjobs.drivers.postgres import PostgresDriver
from xjobs.drivers.rate_keys import PUSH_MOST, RateAsk, rate_keys_of

WIDE_OPEN = (1_000_000, 1_000.0)      # a rate no window of this run fills


def enqueue(driver: PostgresDriver, name: str, n: int, key: Callable[[int], str | None], offset: int = 0) -> None:
    jobs = [NewJob(name=name, queue="bench", payload=b"{}", idempotency_key=f"{name}:{offset + i}",
                   rate_key=key(i)) for i in range(n)]
    for start in range(0, n, 5000):
        driver.job_enqueue(jobs[start:start + 5000])


def drain(driver: PostgresDriver, n: int, batch: int, *, rate: tuple[int, float] | None) -> float:
    """Seconds to claim, gate (when ``rate``) and complete ``n`` jobs, ``batch`` at a time."""
    store = rate_keys_of(driver)
    assert store is not None
    done, began = 0, time.perf_counter()
    while done < n:
        jobs = driver.job_claim(Claim(["bench"], batch, 60_000.0, "bench"))
        if not jobs:
            raise RuntimeError(f"the queue ran dry after {done} of {n} jobs")
        if rate is not None:
            grants = store.rate_take([RateAsk(j.id, j.token, rate[0], rate[1]) for j in jobs])
            assert all(g.granted for g in grants), "a window filled: raise WIDE_OPEN"
        driver.job_ack_many([Lease(j.id, j.token) for j in jobs])
        done += len(jobs)
    return time.perf_counter() - began


def raw_drain(dsn: str, schema: str, n: int, batch: int) -> float:
    """The same work as hand-written SQL: claim with skip locked, complete by id."""
    claim = (f"update {schema}.jobs set state = 'running', attempt = attempt + 1, started_at = now() "
             f"where id = any(array(select id from {schema}.jobs where state = 'ready' and queue = 'bench' "
             f"order by priority, run_at, id limit %s for update skip locked)) returning id")
    finish = f"update {schema}.jobs set state = 'completed', finished_at = now() where id = any(%s)"
    done, began = 0, time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        while done < n:
            ids = [r[0] for r in conn.execute(claim, (batch,), prepare=True).fetchall()]
            if not ids:
                raise RuntimeError("the raw queue ran dry")
            conn.execute(finish, (ids,))
            done += len(ids)
    return time.perf_counter() - began


def scenario(dsn: str, jobs: int, batch: int, setup: Callable[[PostgresDriver], tuple[int, float] | None],
             raw: bool = False) -> float:
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema)
    try:
        rate = setup(driver)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"analyze {schema}.jobs")
        return raw_drain(dsn, schema, jobs, batch) if raw else drain(driver, jobs, batch, rate=rate)
    finally:
        driver.close()
        drop_schema(dsn, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    n, keys = args.jobs, args.keys

    def plain(driver: PostgresDriver) -> None:
        enqueue(driver, "plain", n, lambda i: None)

    def many_keys(driver: PostgresDriver) -> tuple[int, float]:
        enqueue(driver, "rated", n, lambda i: f"key-{i % keys}")
        return WIDE_OPEN

    def one_key(driver: PostgresDriver) -> tuple[int, float]:
        enqueue(driver, "rated", n, lambda i: "key-0")
        return WIDE_OPEN

    def beside_full_key(backlog: int) -> Callable[[PostgresDriver], None]:
        def setup(driver: PostgresDriver) -> None:
            # the full key's jobs first in line: enqueued first, its window filled for an hour
            # by one take, which moves PUSH_MOST of them out of the claims' way
            enqueue(driver, "rated", backlog, lambda i: "full")
            [first] = driver.job_claim(Claim(["bench"], 1, 60_000.0, "bench"))
            store = rate_keys_of(driver)
            assert store is not None
            assert [g.granted for g in store.rate_take([RateAsk(first.id, first.token, 1, 3_600_000.0)])] == [True]
            enqueue(driver, "plain", n, lambda i: None, offset=backlog)
        return setup

    rows = [("raw SQL claim + complete", scenario(args.dsn, n, args.batch, plain, raw=True)),
            ("plain (no rate)", scenario(args.dsn, n, args.batch, plain)),
            (f"rated, {keys:,} keys", scenario(args.dsn, n, args.batch, many_keys)),
            ("rated, one key", scenario(args.dsn, n, args.batch, one_key)),
            (f"plain beside a full key, {PUSH_MOST // 2:,} ready", scenario(args.dsn, n, args.batch,
                                                                          beside_full_key(PUSH_MOST // 2))),
            (f"plain beside a full key, {2 * PUSH_MOST:,} ready", scenario(args.dsn, n, args.batch,
                                                                         beside_full_key(2 * PUSH_MOST)))]
    raw, plain_s = rows[0][1], rows[1][1]
    print(f"claim + gate + complete of {n:,} jobs in batches of {args.batch}, one session")
    print(f"{'scenario':<40} {'jobs/s':>10} {'us/job':>8} {'vs raw':>7} {'vs plain':>9}")
    for name, seconds in rows:
        print(f"{name:<40} {n / seconds:>10,.0f} {seconds / n * 1e6:>8.0f} {seconds / raw:>7.2f} "
              f"{seconds / plain_s:>9.2f}")


if __name__ == "__main__":
    main()
