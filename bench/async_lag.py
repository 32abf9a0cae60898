"""The event loop while the async API enqueues: how late an asyncio heartbeat runs, beside a raw
psycopg ``AsyncConnection`` insert doing the same calls in the same run.

    python bench/async_lag.py [--dsn URL] [--jobs 1000] [--tasks 10] [--rounds 3] [--only TEXT]

A heartbeat task sleeps 1 ms at a time and records how much later than asked it woke (its
lag: the longest stretch the loop could not run it), and how much CPU time the loop's thread
spent between two of its wakes (what the code on the loop cost; unlike the lag, it leaves
out the time the operating system gave the CPU to other processes, which on a loaded machine
is most of the lag's tail). Each row makes ``--jobs`` no-op jobs while the heartbeat runs
and prints the lag's p50, p99 and max and the CPU stretch's p99 and max (ms) over
``--rounds`` rounds, with the jobs made per second and its ratio to the raw row above it.

Each xjobs row follows its raw baseline: the same calls, the same connections and the same
transactions, but a hand-written single ``INSERT`` of the columns an enqueue writes (the
batch: one ``INSERT ... SELECT FROM unnest``). What separates the two is what xjobs does on
the loop: checking the input, its key and tenant, encoding it, and its statement. The first
row is the loop with nothing to do (the heartbeat's own floor), the second the synchronous
``enqueue()`` called on the loop, for contrast: what an async handler that forgot the ``a``
does to every other request. The goal is a lag under 5 ms at p99 and at its max; the last
column says whether a row kept it. Rounds are interleaved (each round runs every row once)
so that a burst of load on a shared machine lands on every row, not on one. Each row
enqueues into a fresh schema; nothing here is asserted (timings go to this table).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import orjson
import psycopg

import noop_app
from daemon import drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import aenqueue_many, enqueue_many

Scenario = Callable[[PostgresDriver, str, int, int], Awaitable[None]]
GOAL_MS = 5.0


def raw_insert(schema: str) -> str:
    """One job row, the columns an enqueue writes (as ``enqueue_bench.py``'s raw baseline)."""
    return (f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority, "
            f"max_attempts, run_at, created_at) values ('noop', 'bench', 'ready', %s, %s, 'none', 0, 5, "
            f"now(), now()) on conflict do nothing returning id")


def raw_batch(schema: str) -> str:
    return (f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority, "
            f"max_attempts, run_at, created_at) select 'noop', 'bench', 'ready', p, k, 'none', 0, 5, "
            f"now(), now() from unnest(%s::jsonb[], %s::text[]) as t(p, k) on conflict do nothing returning id")


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


async def raw_on_one_connection(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    insert = raw_insert(driver.schema)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for n in range(jobs):
            async with conn.transaction():
                await (await conn.execute(insert, (orjson.dumps(n).decode(), str(n)), prepare=True)).fetchone()


async def on_one_connection(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        for n in range(jobs):
            async with conn.transaction():     # one application transaction per enqueue
                await aenqueue_many(noop_app.noop, [n], conn=conn, driver=driver)


async def raw_on_connections(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    insert = raw_insert(driver.schema)

    async def one_task(first: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            for n in range(first, jobs, tasks):
                async with conn.transaction():
                    await (await conn.execute(insert, (orjson.dumps(n).decode(), str(n)), prepare=True)).fetchone()
    await asyncio.gather(*(one_task(t) for t in range(tasks)))


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


async def raw_one_batch(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await (await conn.execute(raw_batch(driver.schema), ([orjson.dumps(n).decode() for n in range(jobs)],
                                                             [str(n) for n in range(jobs)]))).fetchall()


async def one_batch(driver: PostgresDriver, dsn: str, jobs: int, tasks: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await aenqueue_many(noop_app.noop, list(range(jobs)), conn=conn, driver=driver)


@dataclass
class Row:
    label: str
    scenario: Scenario
    counts: bool                 # a rate of jobs made means something
    baseline: bool = False       # a raw row: the xjobs row after it is compared with it
    lags: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)


def rows() -> list[Row]:
    return [
        Row("idle loop (the heartbeat's floor)", idle, False),
        Row("enqueue() on the loop, for contrast", blocking, True),
        Row("raw INSERT, 1 AsyncConnection", raw_on_one_connection, True, baseline=True),
        Row("aenqueue(conn=), 1 AsyncConnection", on_one_connection, True),
        Row("raw INSERT, {tasks} tasks, own connections", raw_on_connections, True, baseline=True),
        Row("aenqueue(conn=), {tasks} tasks, own connections", on_connections, True),
        Row("aenqueue() no conn, {tasks} tasks (thread)", without_connection, True),
        Row("raw INSERT ... unnest({jobs}), one statement", raw_one_batch, True, baseline=True),
        Row("aenqueue_many({jobs}, conn=), one call", one_batch, True),
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
    parser.add_argument("--only", default="", metavar="TEXT",
                        help="only the rows whose scenario contains TEXT (and the idle floor)")
    args = parser.parse_args()
    table = [row for row in rows() if row.scenario is idle or args.only in row.label]
    for _ in range(args.rounds):
        for row in table:
            got, cpu, elapsed = asyncio.run(measure(row.scenario, args.dsn, args.jobs, args.tasks))
            row.lags += got
            row.busy += cpu
            row.rates.append(args.jobs / elapsed)
    load = os.getloadavg()[0]
    print(f"Heartbeat lag while {args.jobs:,} jobs are made (ms; {args.rounds} rounds, {os.cpu_count()} cores, "
          f"load {load:.1f}, server on this machine; goal: lag p99 and max < {GOAL_MS:g} ms)")
    print(f"{'':<48} {'':>9} {'':>7} {'lag':>7} {'lag':>7} {'lag':>7} {'cpu':>7} {'cpu':>7}")
    print(f"{'scenario':<48} {'jobs/s':>9} {'vs raw':>7} {'p50':>7} {'p99':>7} {'max':>7} {'p99':>7} "
          f"{'max':>7}  goal")
    raw: Row | None = None
    for row in table:
        rate = statistics.median(row.rates)
        shown = f"{rate:,.0f}" if row.counts else "-"
        versus = "" if row.baseline or raw is None or not row.counts else f"{rate / statistics.median(raw.rates):.2f}"
        p99, top = percentile(row.lags, 0.99), max(row.lags)
        kept = "kept" if p99 < GOAL_MS and top < GOAL_MS else "missed"
        print(f"{row.label.format(tasks=args.tasks, jobs=f'{args.jobs:,}'):<48} {shown:>9} {versus:>7} "
              f"{percentile(row.lags, 0.5):7.2f} {p99:7.2f} {top:7.2f} {percentile(row.busy, 0.99):7.2f} "
              f"{max(row.busy):7.2f}  {kept}")
        if row.baseline:
            raw = row
    floor = max(table[0].lags)
    if floor >= GOAL_MS:
        print(f"The idle loop itself woke up to {floor:.2f} ms late: the machine was busy, and a lag "
              f"beyond that floor is its scheduling; the loop's own work is the cpu columns.")


if __name__ == "__main__":
    main()
