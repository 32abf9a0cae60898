"""The event loop while the async API enqueues: how late an asyncio heartbeat runs.

    python bench/async_enqueue.py [--dsn URL] [--jobs 1000] [--tasks 10] [--rounds 3]

A heartbeat task sleeps 1 ms at a time and records how much later than asked it woke (its
lag: the longest stretch the loop could not run it), and how much CPU time the loop's thread
spent between two of its wakes (what the code on the loop cost; unlike the lag, it leaves
out the time the operating system gave the CPU to other processes, which on a loaded machine
is most of the lag's tail). Each row enqueues ``--jobs`` no-op jobs one call at a time while
the heartbeat runs, and prints the lag's p50, p99 and max and the CPU stretch's p99 and max
(ms) over ``--rounds`` rounds, with the calls' rate. The first row is the loop with nothing to do (the
heartbeat's own floor), the second the synchronous ``enqueue()`` called on the loop, for
contrast: what an async handler that forgot the ``a`` does to every other request.
Each row enqueues into a fresh schema; nothing here is asserted (timings go to this table).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Awaitable, Callable

import psycopg

import noop_app
from daemon import drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import aenqueue_many, enqueue_many

Scenario = Callable[[PostgresDriver, str, int, int], Awaitable[None]]


async def heartbeat(lags: list[float], busy: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    cpu = time.thread_time()
    while not stop.is_set():
        asked = loop.time() + 0.001
        await asyncio.sleep(0.001)
        lags.append(max(0.0, loop.time() - asked) * 1000.0)
        busy.append((time.thread_time() - cpu) * 1000.0)
        cpu = time.thread_time()


async def idle(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    await asyncio.sleep(0.5)


async def blocking(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    for n in range(jobs):
        enqueue_many(noop_app.noop, [n], driver=driver)   # the loop waits on every round trip


async def on_one_connection(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for n in range(jobs):
            async with conn.transaction():     # one application transaction per enqueue
                await aenqueue_many(noop_app.noop, [n], conn=conn, driver=driver)


async def on_connections(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async def one_task(first: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            for n in range(first, jobs, tasks):
                async with conn.transaction():
                    await aenqueue_many(noop_app.noop, [n], conn=conn, driver=driver)
    await asyncio.gather(*(one_task(t) for t in range(tasks)))


async def without_connection(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async def one_task(first: int) -> None:
        for n in range(first, jobs, tasks):
            await aenqueue_many(noop_app.noop, [n], driver=driver)   # a worker thread, the pool
    await asyncio.gather(*(one_task(t) for t in range(tasks)))


async def one_batch(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await aenqueue_many(noop_app.noop, list(range(jobs)), conn=conn, driver=driver)


ROWS: list[tuple[str, Scenario, bool]] = [
    ("idle loop (the heartbeat's floor)", idle, False),
    ("enqueue() on the loop, for contrast", blocking, True),
    ("aenqueue(conn=), 1 AsyncConnection", on_one_connection, True),
    ("aenqueue(conn=), {tasks} tasks, own connections", on_connections, True),
    ("aenqueue() no conn, {tasks} tasks (thread)", without_connection, True),
    ("aenqueue_many({jobs}, conn=), one call", one_batch, False),
]


async def measure(scenario: Scenario, dsn: str, jobs: int, tasks: int
                  ) -> tuple[list[float], list[float], float]:
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema, pool_size=4)
    try:
        enqueue_many(noop_app.noop, [-1], driver=driver)      # the pool is open before timing
        lags: list[float] = []
        busy: list[float] = []
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(lags, busy, stop))
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await scenario(driver, dsn, jobs, tasks)
        elapsed = time.perf_counter() - started
        stop.set()
        await beat
        return lags, busy, elapsed
    finally:
        driver.close()
        drop_schema(dsn, schema)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"Heartbeat lag while {args.jobs:,} enqueues run, one call each (ms; {args.rounds} rounds, "
          f"{os.cpu_count()} cores, server on this machine)")
    print(f"{'':<48} {'':>9} {'lag':>7} {'lag':>7} {'lag':>7} {'cpu':>7} {'cpu':>7}")
    print(f"{'scenario':<48} {'calls/s':>9} {'p50':>7} {'p99':>7} {'max':>7} {'p99':>7} {'max':>7}")
    for label, scenario, counts in ROWS:
        lags: list[float] = []
        busy: list[float] = []
        rates: list[float] = []
        for _ in range(args.rounds):
            got, cpu, elapsed = asyncio.run(measure(scenario, args.dsn, args.jobs, args.tasks))
            lags += got
            busy += cpu
            rates.append(args.jobs / elapsed)
        rate = f"{statistics.median(rates):,.0f}" if counts else "-"
        print(f"{label.format(tasks=args.tasks, jobs=f'{args.jobs:,}'):<48} {rate:>9} {percentile(lags, 0.5):7.2f} "
              f"{percentile(lags, 0.99):7.2f} {max(lags):7.2f} {percentile(busy, 0.99):7.2f} {max(busy):7.2f}")


if __name__ == "__main__":
    main()
