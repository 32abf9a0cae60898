"""Throughput, cost per job, enqueue, pickup and memory, in one run, as users run xjobs.

Prints one table per concern from one run on one server (run it on a quiet machine: WAL and
statements are read server-wide).

Drain: N no-op jobs are enqueued, then drained

* by the raw loop: ``RAW_CONNECTIONS`` sessions claiming ``RAW_BATCH`` rows at a time with
  ``for update skip locked`` and completing each batch with one ``update ... where id =
  any(...)``, on a bare table (id, state, payload) and on a freshly installed xjobs ``jobs``
  table with every index the queue keeps ("vs table": what xjobs costs over the same SQL work
  on the same table; "vs bare": over the least a queue table can be);
* by ``xjobsd run`` as a subprocess (``bench/daemon.py``), timed on the server's clock from
  the first start to the last finish, for each ``--queue`` shape;
* by PgQueuer, the fastest Python peer, through its own CLI (``bench/pgqueuer_drain.py``: 2
  processes, batches of 500, an ``async def`` no-op), timed on the server's clock from its own
  log; needs the ``bench`` extra (``pip install 'xjobsd[bench]'``), else the row says so;
* by a ``QueueWorker`` in this process (def, async def, and a job of three ``ctx.step.run``).

stmts/job: statements the server ran per job (``pg_stat_statements`` calls when the
extension is loaded, else committed transactions: every statement of an autocommit session
is one); for the raw loop, its two statements per batch. WAL B/job: ``pg_current_wal_lsn()``
before and after, over the jobs drained.

Enqueue: one job per ``enqueue()`` call and transaction against a raw single-row ``INSERT``
per transaction on the same table; ``enqueue_many`` in batches of 10,000 and as ONE call of N
inputs in a fresh process (its peak client memory is the resident-set growth of that call;
``bench/enqueue_bench.py``).

Pickup: ``enqueue()`` called to the body's first line, through ``xjobsd``, on an idle queue
and while another queue of the same daemon drains a steady stream at half of what the first
``--queue`` shape drained (``bench/pickup.py``). Memory: VmRSS, PSS and USS of every process
of an idle ``xjobsd --queue bench``, just started and after draining 20,000 jobs
(``--memory-only`` prints that table alone, in a few seconds).

    python bench/throughput.py [--jobs 100000] [--queue bench=256 ...] [--rounds 3] [--dsn ...] [--memory-only]
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
from daemon import (Daemon, Memory, ServerWork, daemon_drain, drop_schema, enqueue_noops, fresh_schema, percentile,
                    wait_drained)
from enqueue_bench import enqueue_bulk, enqueue_single
from pickup import daemon_pickup
from pgqueuer_drain import PGQUEUER_BATCH, PGQUEUER_PROCESSES, pgqueuer_drain, pgqueuer_missing
from xjobs.config import QueueSpec
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.host import InProcessHost, QueueWorker
from xjobs.outbox import stage, stage_many
from xjobs.workers.outbox_relay import OutboxRelay


RAW_BATCH = 500
RAW_CONNECTIONS = 2
# the no-op jobs an idle daemon drains before its memory is read again
MEMORY_DRAIN = 20_000


def raw_loop(dsn: str, jobs: int, *, on_jobs_table: bool) -> tuple[float, float]:
    """(jobs/s, WAL bytes per job) of the raw loop: ``RAW_CONNECTIONS`` sessions, each claiming
    ``RAW_BATCH`` rows with ``for update skip locked`` and completing them with one ``update
    ... where id = any(...)``.

    On a bare table (id, state, payload) with one partial index, or on a freshly installed
    xjobs ``jobs`` table (every index the queue keeps, jobs enqueued through ``enqueue_many``),
    setting the columns a claim and a completion set: the same SQL work minus everything
    xjobs does around it."""
    if on_jobs_table:
        schema = fresh_schema(dsn)
        enqueue_noops(dsn, schema, jobs)
        table = f"{schema}.jobs"
        claim = (f"update {table} t set state = 'running', attempt = t.attempt + 1, lease_token = 1, "
                 f"claimed_by = 'raw', started_at = now(), lease_expires_at = now() + interval '1 minute' "
                 f"from (select id from {table} where state = 'ready' and queue = 'bench' "
                 f"order by priority, run_at, id limit %s for update skip locked) p "
                 f"where t.id = p.id returning t.id, t.payload")
        done = (f"update {table} set state = 'completed', finished_at = now(), lease_token = null, "
                f"lease_expires_at = null where id = any(%s)")
    else:
        schema, table = "", f"xjobs_raw_{uuid.uuid4().hex[:8]}"
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
    counts: list[int] = []
    go = threading.Event()

    def loop() -> None:
        total = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            go.wait()
            while rows := conn.execute(claim, (RAW_BATCH,), prepare=True).fetchall():
                conn.execute(done, ([r[0] for r in rows],), prepare=True)
                total += len(rows)
        counts.append(total)

    threads = [threading.Thread(target=loop) for _ in range(RAW_CONNECTIONS)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)   # every session connected: time the loop, not the connects
    before = ServerWork.read(dsn)
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    wal, _ = ServerWork.read(dsn).since(dsn, before)
    if schema:
        drop_schema(dsn, schema)
    else:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"drop table {table}")
    assert sum(counts) == jobs, (counts, jobs)
    return jobs / elapsed, wal / jobs


def bench_queue(dsn: str, jobs: int, concurrency: int, is_async: bool,
                steps: int = 0) -> tuple[float, float, dict[str, int], float]:
    """(enqueue rate, drain rate, step statements issued, WAL bytes per job) for ``jobs``
    no-op jobs, each with ``steps`` ``ctx.step.run`` calls. The WAL is the database work a job
    costs beside the time."""
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
    before = ServerWork.read(dsn)
    started = time.perf_counter()
    host.run(until=lambda: worker.stats_.completed >= jobs)
    drain_rate = jobs / (time.perf_counter() - started)
    wal_per_job = ServerWork.read(dsn).since(dsn, before)[0] / jobs
    stats = driver.job_stats()["bench"]
    driver.close()
    drop_schema(dsn, schema)
    assert stats == {"completed": jobs}, stats
    return enqueue_rate, drain_rate, calls, wal_per_job


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


def idle_memory(dsn: str, jobs: int) -> tuple[dict[str, Memory], dict[str, Memory]]:
    """VmRSS, PSS and USS (MiB) of each process of an idle ``xjobsd`` serving one queue at the
    default shape: just started, and again idle after draining ``jobs`` no-op jobs (what a
    worker's own work has made private of the pages it shares with its supervisor)."""
    schema = fresh_schema(dsn)
    try:
        with Daemon(dsn, schema, ["bench"]) as daemon:
            daemon.wait_ready()
            time.sleep(2.0)   # a few heartbeats and stats rounds
            idle = daemon.memory_mib()
            enqueue_noops(dsn, schema, jobs)
            wait_drained(dsn, schema)
            time.sleep(2.0)
            return idle, daemon.memory_mib()
    finally:
        drop_schema(dsn, schema)


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
    published, pending = relay.stats().published, driver.outbox_summary().pending
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


def print_memory(memory: dict[str, Memory], worked: dict[str, Memory]) -> None:
    def cells(mem: Memory | None) -> str:
        return f"{mem.rss:>7.1f} {mem.pss:>6.1f} {mem.uss:>6.1f}" if mem else f"{'-':>7} {'-':>6} {'-':>6}"

    print(f"\n{'xjobsd --queue bench (1x16), idle':<44} {'just started':>21}   {f'after {MEMORY_DRAIN:,} jobs':>21}")
    print(f"{'MiB':<44} {'VmRSS':>7} {'PSS':>6} {'USS':>6}   {'VmRSS':>7} {'PSS':>6} {'USS':>6}")
    for title, mem in sorted(memory.items()):
        print(f"{title:<44} {cells(mem)}   {cells(worked.get(title))}")
    total = [Memory(sum(m.rss for m in ms.values()), sum(m.pss for m in ms.values()), sum(m.uss for m in ms.values()))
             for ms in (memory, worked)]
    print(f"{'all processes (sum)':<44} {cells(total[0])}   {cells(total[1])}")
    print("(VmRSS counts every page a child shares with its supervisor whole, in each process; PSS "
          "divides each page among the processes that map it, so its sum is what the daemon costs)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs per drain")
    parser.add_argument("--queue", action="append",
                        help="an xjobsd shape to drain with (repeatable; default bench=256 and bench=1024)")
    parser.add_argument("--concurrency", type=int, default=256, help="slots of the in-process worker")
    parser.add_argument("--step-jobs", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-only", action="store_true", help="print the memory table alone")
    args = parser.parse_args()
    xjobs.configure(dsn=args.dsn)
    dsn, jobs = args.dsn, args.jobs
    if args.memory_only:
        print_memory(*idle_memory(dsn, MEMORY_DRAIN))
        return 0
    shapes = args.queue or ["bench=256", "bench=1024"]

    drains: dict[str, list[float]] = {}
    wal: dict[str, list[float]] = {}
    statements: dict[str, list[float]] = {}

    def record(name: str, rate: float, wal_per_job: float, per_job: float | None = None) -> None:
        drains.setdefault(name, []).append(rate)
        wal.setdefault(name, []).append(wal_per_job)
        if per_job is not None:
            statements.setdefault(name, []).append(per_job)

    raw_statements = 2 / RAW_BATCH
    missing = pgqueuer_missing()
    peer = f"PgQueuer ({PGQUEUER_PROCESSES} processes, batches of {PGQUEUER_BATCH})"
    enqueue: list[float] = []
    staged: list[float] = []
    relayed: list[float] = []
    step_calls: dict[str, int] = {}
    source = "-"   # where the xjobsd rows' statements were counted
    for _ in range(args.rounds):
        record("raw loop, bare table", *raw_loop(dsn, jobs, on_jobs_table=False), raw_statements)
        record("raw loop, xjobs jobs table", *raw_loop(dsn, jobs, on_jobs_table=True), raw_statements)
        if not missing:
            record(peer, *pgqueuer_drain(dsn, jobs))
        for shape in shapes:
            spec = QueueSpec.parse(shape)[1]
            drain = daemon_drain(dsn, jobs, [shape])
            source = drain.source
            record(f"xjobsd --queue {shape} ({spec.processes}x{spec.concurrency})", drain.rate,
                   drain.wal_per_job, drain.statements_per_job)
        rate_in, rate_out, _, wal_per_job = bench_queue(dsn, jobs // 5, args.concurrency, is_async=False)
        enqueue.append(rate_in)
        record("in-process worker, def no-op", rate_out, wal_per_job)
        _, rate_out, _, wal_per_job = bench_queue(dsn, jobs // 5, args.concurrency, is_async=True)
        record("in-process worker, async no-op", rate_out, wal_per_job)
        _, rate, step_calls, wal_per_job = bench_queue(dsn, args.step_jobs, args.concurrency, is_async=False, steps=3)
        record("in-process worker, def 3 steps", rate, wal_per_job)
        stage_rate, publish_rate = bench_outbox(dsn, jobs // 5)
        staged.append(stage_rate)
        relayed.append(publish_rate)
    single_raw, single = enqueue_single(dsn, 2_000)
    bulk_rate, bulk_peak, _, _ = enqueue_bulk(dsn, jobs)
    bulk_raw = enqueue_bulk(dsn, jobs, raw=True)[0]
    main_shape = shapes[0]
    capacity = statistics.median(drains[next(k for k in drains if k.startswith(f"xjobsd --queue {main_shape} "))])
    idle = daemon_pickup(dsn, 200, load_queue=main_shape)
    loaded = daemon_pickup(dsn, 200, load_per_s=capacity / 2, load_queue=main_shape)
    outbox_latency = outbox_pickup(dsn, 30)
    memory, worked = idle_memory(dsn, MEMORY_DRAIN)

    bare, table = statistics.median(drains["raw loop, bare table"]), statistics.median(drains["raw loop, xjobs jobs table"])
    med = statistics.median
    print(f"\nDrain of {jobs:,} no-op jobs, median of {args.rounds} rounds; raw loop: {RAW_CONNECTIONS} "
          f"sessions, batches of {RAW_BATCH}; {os.cpu_count()} cores, server and workers on one machine")
    print(f"{'drain':<44} {'jobs/s':>9} {'vs bare':>8} {'vs table':>9} {'vs PgQueuer':>12} {'stmts/job':>10} "
          f"{'WAL B/job':>10} {'WAL vs table':>13}")
    table_wal = med(wal["raw loop, xjobs jobs table"])
    pgq = med(drains[peer]) if peer in drains else None
    for name, rates in drains.items():
        rate, per_job = med(rates), med(wal[name])
        stmts = f"{med(statements[name]):.4f}" if name in statements else "-"
        vs_peer = f"{rate / pgq:.2f}" if pgq else "-"
        print(f"{name:<44} {rate:>9,.0f} {rate / bare:>8.2f} {rate / table:>9.2f} {vs_peer:>12} {stmts:>10} "
              f"{per_job:>10,.0f} {per_job / table_wal:>13.2f}")
    if missing:
        print(f"({peer}: not run, {missing})")
    print(f"(xjobsd rows: statements from {source}, server-wide; per round: "
          + "; ".join(f"{name.split(' (')[0]} {', '.join(f'{r:,.0f}' for r in rates)}"
                      for name, rates in drains.items() if name.startswith("xjobsd")) + ")")

    print(f"\n{'enqueue':<44} {'jobs/s':>9} {'vs raw':>8}")
    print(f"{'raw single-row INSERT, one transaction each':<44} {single_raw:>9,.0f} {1.0:>8.2f}")
    print(f"{'enqueue(), one job per call and transaction':<44} {single:>9,.0f} {single / single_raw:>8.2f}")
    print(f"{'enqueue_many, batches of 10,000':<44} {med(enqueue):>9,.0f} {'-':>8}")
    print(f"{f'raw COPY of the same {jobs:,} rows':<44} {bulk_raw:>9,.0f} {1.0:>8.2f}")
    print(f"{f'enqueue_many, one call of {jobs:,}':<44} {bulk_rate:>9,.0f} {bulk_rate / bulk_raw:>8.2f}   "
          f"client memory peak +{bulk_peak:.0f} MiB")
    print(f"{'outbox stage_many (committed)':<44} {med(staged):>9,.0f} {'-':>8}")
    print(f"{'outbox relay stage-to-enqueue':<44} {med(relayed):>9,.0f} {med(relayed) / med(enqueue):>8.2f}"
          f"   (vs enqueue_many)")
    per_step = (step_calls["step_list"] + step_calls["step_put"]) / (3 * args.step_jobs)
    print(f"\n3-step job: {step_calls['step_list'] / args.step_jobs:.2f} step read(s) and "
          f"{step_calls['step_put'] / args.step_jobs:.2f} step write(s) per job, {per_step:.2f} driver calls per step "
          f"(the writes of concurrent runs go out together, fewer statements than calls)")

    print(f"\n{'pickup: enqueue() to body start (ms)':<44} {'p50':>9} {'p99':>8}")
    for name, samples in ((f"xjobsd idle (idle=1x4)", idle),
                          (f"xjobsd at 50% load ({capacity / 2:,.0f} jobs/s on {main_shape})", loaded),
                          ("outbox commit to body start (in-process)", outbox_latency)):
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(f"{name:<44} {p50:>9.2f} {p99:>8.2f}")
    print_memory(memory, worked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
