"""Throughput benchmark: bulk enqueue, in-process worker drain, the outbox relay, and a raw
psycopg baseline.

Prints one table from one run. The baseline is the minimal batched claim-and-complete loop on
a bare table (one ``update ... for update skip locked ... returning id`` to claim a batch and
one ``update ... where id = any(...)`` to complete it), measured on the same server in the
same run, so the ratio is what the queue's features cost over raw SQL. The outbox rows stage
jobs in committed transactions (``stage_many``, 1,000 per transaction) and time the relay
publishing them into the queue (its rate is shown against the bulk enqueue, the path it ends
in); the latency rows time one job from its enqueue (or its staging commit) to its body's
start on an idle worker. The step rows drain a job of three ``ctx.step.run`` calls against
the no-op job in the same run, and count the driver's step statements per job: each
``step_list`` (the attempt's one read) and each ``step_put`` (a step's one write) is one
statement, one round trip.

WAL B/job is the server's WAL written during a drain (``pg_current_wal_lsn()`` before and after)
divided by the jobs drained: the database work one job costs, raw and through xjobs. It is
server-wide, so run the benchmark on a quiet server.

    python bench/throughput.py [--jobs 20000] [--concurrency 256] [--dsn ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid

import psycopg

import xjobs
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.outbox import stage, stage_many
from xjobs.workers.host import InProcessHost
from xjobs.workers.outbox_relay import OutboxRelay
from xjobs.workers.queue_worker import QueueWorker


def raw_baseline(dsn: str, jobs: int, batch: int) -> float:
    table = f"xjobs_raw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create table {table} (id bigint generated always as identity primary key, "
                     "state text not null default 'ready', payload jsonb not null default '{}')")
        conn.execute(f"create index on {table} (id) where state = 'ready'")
        conn.execute(f"insert into {table} (payload) select jsonb_build_object('n', g) "
                     f"from generate_series(1, {jobs}) g")
        conn.execute(f"analyze {table}")
        claim = (f"update {table} t set state = 'running' from (select id from {table} "
                 f"where state = 'ready' order by id limit %s for update skip locked) p "
                 f"where t.id = p.id returning t.id, t.payload")
        done = f"update {table} set state = 'done' where id = any(%s)"
        started = time.perf_counter()
        wal_before = wal_lsn(dsn)
        total = 0
        while True:
            rows = conn.execute(claim, (batch,), prepare=True).fetchall()
            if not rows:
                break
            conn.execute(done, ([r[0] for r in rows],), prepare=True)
            total += len(rows)
        elapsed = time.perf_counter() - started
        WAL["raw"].append(wal_since(dsn, wal_before) / jobs)
        conn.execute(f"drop table {table}")
    assert total == jobs, (total, jobs)
    return jobs / elapsed


# WAL bytes per drained job, per measure: the database work a job costs beside the time
WAL: dict[str, list[float]] = {"raw": [], "def": [], "async": [], "def 3 steps": [], "async 3 steps": []}


def wal_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("select pg_current_wal_lsn()::text").fetchone()[0]


def wal_since(dsn: str, before: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return float(conn.execute("select pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)",
                                  (before,)).fetchone()[0])


def fresh_schema(dsn: str) -> str:
    schema = f"xjobs_bench_{uuid.uuid4().hex[:8]}"
    PostgresDriver(dsn, schema=schema).migrate()
    return schema


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"drop schema {schema} cascade")


def bench_queue(dsn: str, jobs: int, concurrency: int, is_async: bool,
                steps: int = 0) -> tuple[float, float, dict[str, int]]:
    """(enqueue rate, drain rate, step statements issued) for ``jobs`` no-op jobs, each with
    ``steps`` ``ctx.step.run`` calls."""
    schema = fresh_schema(dsn)
    registry = xjobs.Registry()
    if is_async:
        @xjobs.job(queue="bench", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="noop")
        async def noop(ctx, input):  # noqa: ARG001
            for n in range(steps):
                await ctx.step.run(f"s{n}", lambda: n)
    else:
        @xjobs.job(queue="bench", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="noop")
        def noop(ctx, input):  # noqa: ARG001
            for n in range(steps):
                ctx.step.run(f"s{n}", lambda: n)
    driver = PostgresDriver(dsn, schema=schema)
    started = time.perf_counter()
    for start in range(0, jobs, 10_000):
        enqueue_many(noop, list(range(start, min(jobs, start + 10_000))), driver=driver)
    enqueue_rate = jobs / (time.perf_counter() - started)
    worker_driver = PostgresDriver(dsn, schema=schema)
    calls = _count_calls(worker_driver, ("step_list", "step_put"))
    worker = QueueWorker(driver=worker_driver, registry=registry, queue="bench", concurrency=concurrency)
    host = InProcessHost(worker)
    wal_before = wal_lsn(dsn)
    started = time.perf_counter()
    host.run(until=lambda: worker.stats_.totals["completed"] >= jobs)
    drain_rate = jobs / (time.perf_counter() - started)
    WAL[("async" if is_async else "def") + (f" {steps} steps" if steps else "")].append(
        wal_since(dsn, wal_before) / jobs)
    stats = driver.job_stats()["bench"]
    driver.close()
    drop_schema(dsn, schema)
    assert stats == {"completed": jobs}, stats
    return enqueue_rate, drain_rate, calls


def _count_calls(driver: PostgresDriver, verbs: tuple[str, ...]) -> dict[str, int]:
    """Count calls of ``verbs`` on this driver object (each is one statement)."""
    counts = {verb: 0 for verb in verbs}
    lock = threading.Lock()
    for verb in verbs:
        original = getattr(driver, verb)

        def counted(*args, _verb=verb, _original=original, **kwargs):
            with lock:
                counts[_verb] += 1
            return _original(*args, **kwargs)
        setattr(driver, verb, counted)
    return counts


def idle_pickup(dsn: str, samples: int) -> list[float]:
    """Enqueue one job into an empty, idle queue and time until its body starts."""
    schema = fresh_schema(dsn)
    registry = xjobs.Registry()
    started: dict[int, float] = {}
    arrived = threading.Event()

    @xjobs.job(queue="idle", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="ping")
    def ping(ctx, input):
        started[input] = time.perf_counter()
        arrived.set()

    driver = PostgresDriver(dsn, schema=schema)
    worker = QueueWorker(driver=PostgresDriver(dsn, schema=schema), registry=registry, queue="idle",
                         concurrency=4, settings=xjobs.Settings(poll_ms=5000))
    host = InProcessHost(worker).start()
    latencies = []
    time.sleep(0.3)  # let the worker reach its idle wait: this measures pickup from idle
    for n in range(samples):
        arrived.clear()
        sent = time.perf_counter()
        enqueue_many(ping, [n], driver=driver)
        if not arrived.wait(10):
            raise RuntimeError("idle pickup timed out")
        latencies.append((started[n] - sent) * 1000.0)
        time.sleep(0.05)
    host.stop()
    driver.close()
    drop_schema(dsn, schema)
    return latencies


def bench_outbox(dsn: str, jobs: int) -> tuple[float, float]:
    """Stage ``jobs`` rows in committed transactions, then time one relay publishing them all."""
    schema = fresh_schema(dsn)
    registry = xjobs.Registry()

    @xjobs.job(queue="bench", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="noop")
    def noop(ctx, input):  # noqa: ARG001
        return None

    driver = PostgresDriver(dsn, schema=schema)
    started = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        for start in range(0, jobs, 1_000):
            with conn.transaction():
                stage_many(conn, noop, list(range(start, min(jobs, start + 1_000))), driver=driver)
    stage_rate = jobs / (time.perf_counter() - started)
    relay = OutboxRelay(driver=PostgresDriver(dsn, schema=schema), identity="bench-relay", batch=1_000)
    relay.initialize()
    started = time.perf_counter()
    while relay.publish() == 0.0:    # a pass yields every second while a backlog is left
        pass
    publish_rate = jobs / (time.perf_counter() - started)
    relay.close()
    published, pending = relay.stats()["published"], driver.outbox_summary().pending
    stats = driver.job_stats()["bench"]
    driver.close()
    drop_schema(dsn, schema)
    assert (published, pending, stats) == (jobs, 0, {"ready": jobs}), (published, pending, stats)
    return stage_rate, publish_rate


def outbox_pickup(dsn: str, samples: int) -> list[float]:
    """Stage one job in a committed transaction on an idle daemon's roles (a relay and a worker,
    both hosted here) and time from the commit to its body's start."""
    schema = fresh_schema(dsn)
    registry = xjobs.Registry()
    started: dict[int, float] = {}
    arrived = threading.Event()

    @xjobs.job(queue="idle", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="ping")
    def ping(ctx, input):
        started[input] = time.perf_counter()
        arrived.set()

    driver = PostgresDriver(dsn, schema=schema)
    idle = xjobs.Settings(poll_ms=5000)
    worker = QueueWorker(driver=PostgresDriver(dsn, schema=schema), registry=registry, queue="idle",
                         concurrency=4, settings=idle)
    relay = OutboxRelay(driver=PostgresDriver(dsn, schema=schema), identity="bench-relay", settings=idle)
    hosts = [InProcessHost(worker).start(), InProcessHost(relay).start()]
    latencies = []
    time.sleep(0.3)  # let both reach their idle wait
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(samples):
            arrived.clear()
            with conn.transaction():
                stage(conn, ping, n, driver=driver)
            committed = time.perf_counter()
            if not arrived.wait(10):
                raise RuntimeError("outbox pickup timed out")
            latencies.append((started[n] - committed) * 1000.0)
            time.sleep(0.05)
    for host in hosts:
        host.stop()
    driver.close()
    drop_schema(dsn, schema)
    return latencies


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.99) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    xjobs.configure(dsn=args.dsn)

    raw, sync_drain, async_drain, enqueue, staged, relayed = [], [], [], [], [], []
    stepped, stepped_async, step_calls = [], [], {}
    for _ in range(args.rounds):
        raw.append(raw_baseline(args.dsn, args.jobs, args.concurrency))
        rate_in, rate_out, _ = bench_queue(args.dsn, args.jobs, args.concurrency, is_async=False)
        enqueue.append(rate_in)
        sync_drain.append(rate_out)
        async_drain.append(bench_queue(args.dsn, args.jobs, args.concurrency, is_async=True)[1])
        _, rate, step_calls = bench_queue(args.dsn, args.jobs, args.concurrency, is_async=False, steps=3)
        stepped.append(rate)
        stepped_async.append(bench_queue(args.dsn, args.jobs, args.concurrency, is_async=True, steps=3)[1])
        stage_rate, publish_rate = bench_outbox(args.dsn, args.jobs)
        staged.append(stage_rate)
        relayed.append(publish_rate)
    pickup = idle_pickup(args.dsn, 30)
    outbox_latency = outbox_pickup(args.dsn, 30)

    base, bulk = statistics.median(raw), statistics.median(enqueue)
    rows = [
        ("raw psycopg claim+complete loop", base, "1.00"),
        ("xjobs bulk enqueue", bulk, "-"),
        ("xjobs drain, def no-op", statistics.median(sync_drain), f"{statistics.median(sync_drain) / base:.2f}"),
        ("xjobs drain, async def no-op", statistics.median(async_drain), f"{statistics.median(async_drain) / base:.2f}"),
        ("xjobs drain, def 3 steps", statistics.median(stepped), f"{statistics.median(stepped) / base:.2f}"),
        ("xjobs drain, async def 3 steps", statistics.median(stepped_async),
         f"{statistics.median(stepped_async) / base:.2f}"),
        ("outbox stage_many (committed)", statistics.median(staged), "-"),
        ("outbox relay stage-to-enqueue", statistics.median(relayed),
         f"{statistics.median(relayed) / bulk:.2f}*"),
    ]
    wal = {"raw psycopg claim+complete loop": "raw", "xjobs drain, def no-op": "def",
           "xjobs drain, async def no-op": "async", "xjobs drain, def 3 steps": "def 3 steps",
           "xjobs drain, async def 3 steps": "async 3 steps"}
    print(f"\n{args.jobs} jobs, batch/concurrency {args.concurrency}, median of {args.rounds} rounds")
    print(f"{'measure':<36} {'jobs/s':>10} {'vs raw':>7} {'WAL B/job':>10}")
    for name, rate, ratio in rows:
        samples = WAL.get(wal.get(name, ""), [])
        per_job = f"{statistics.median(samples):,.0f}" if samples else "-"
        print(f"{name:<36} {rate:>10,.0f} {ratio:>7} {per_job:>10}")
    print("* against the bulk enqueue, the path the relay ends in")
    sync_rate = statistics.median(sync_drain)
    print(f"\n3-step job vs no-step job (def): {statistics.median(stepped) / sync_rate:.2f}x the jobs/s; "
          f"per job {step_calls['step_list'] / args.jobs:.2f} step read(s) and "
          f"{step_calls['step_put'] / args.jobs:.2f} step write(s) "
          f"= {step_calls['step_put'] / (3 * args.jobs):.2f} write(s) per step, "
          f"{(step_calls['step_list'] + step_calls['step_put']) / (3 * args.jobs):.2f} round trips per step")
    print(f"\n{'latency from idle (ms)':<36} {'p50':>10} {'p99':>7}")
    for name, samples in (("enqueue to body start", pickup), ("outbox commit to body start", outbox_latency)):
        p50, p99 = percentiles(samples)
        print(f"{name:<36} {p50:>10.2f} {p99:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
