"""Enqueue, for ``throughput.py`` and on its own: one job per ``enqueue()`` call and transaction
against a raw single-row ``INSERT`` on the same table, and ONE ``enqueue_many`` call of N inputs
in a fresh process, with the client memory that call added at its peak, against a raw ``COPY``
of the same rows in one transaction (the fastest way PostgreSQL takes rows; it dedupes nothing).
The bulk rows also say where the time went: the client's CPU and its server backend's CPU
per job (read from ``/proc``, so only when the server runs on this machine).

    python bench/enqueue_bench.py [--jobs 100000] [--runs 3] [--dsn ...] [--kind fresh]

``--kind`` says which inputs the bulk call takes: ``fresh`` (every namespace new: the chunks are
copied), or one the COPY cannot take, whose chunks go through the insert statement: ``window``
(the job keeps its key for a dedupe window of an hour), ``repeated`` (every key twice, the second
a duplicate of the first), ``held`` (every key already held by a live job: all duplicates).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import orjson
import psycopg

from daemon import BENCH, drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many


def enqueue_single(dsn: str, jobs: int, rounds: int = 5) -> tuple[float, float]:
    """(raw single-row inserts/s, ``enqueue()`` calls/s): one job per call, one transaction
    each, on one autocommit connection of the same settings. The raw insert writes the columns
    an enqueue writes, into the same table with the same indexes. The two alternate in
    ``rounds`` blocks of ``jobs / rounds`` calls (median of the blocks): a second of noise on
    the machine lands on one block, not on one side."""
    import noop_app
    schema = fresh_schema(dsn)
    raw = (f"insert into {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, priority, "
           f"max_attempts, run_at, created_at) values ('noop', 'bench', 'ready', %s, %s, 'none', 0, 5, "
           f"now(), now()) on conflict do nothing returning id")
    block = max(1, jobs // rounds)
    raw_rates, rates = [], []
    driver = PostgresDriver(dsn, schema=schema, pool_size=1)
    enqueue_many(noop_app.noop, [-1], driver=driver)   # the pool's connection is open
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in range(rounds):
            started = time.perf_counter()
            for n in range(r * block, (r + 1) * block):
                conn.execute(raw, (orjson.dumps(n).decode(), f"raw-{n}"), prepare=True).fetchone()
            raw_rates.append(block / (time.perf_counter() - started))
            started = time.perf_counter()
            for n in range(r * block, (r + 1) * block):
                enqueue_many(noop_app.noop, [n], driver=driver)
            rates.append(block / (time.perf_counter() - started))
    driver.close()
    drop_schema(dsn, schema)
    return statistics.median(raw_rates), statistics.median(rates)


_BULK = """
import os, resource, sys, time
sys.path.insert(0, {bench!r})
import noop_app, psycopg, xjobs
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from enqueue_bench import backend_cpu
driver = PostgresDriver({dsn!r}, schema={schema!r}, pool_size=1)
kind, handle, inputs = {kind!r}, noop_app.noop, range({jobs})
if kind == "window":
    handle = xjobs.job(queue="bench", idempotency_key=str, tenant="none", dedupe_window="1h",
                       registry=xjobs.Registry(), name="noop")(noop_app.noop.fn)
elif kind == "repeated":
    inputs = [n // 2 for n in inputs]
enqueue_many(handle, [-1], driver=driver)
if kind == "held":
    enqueue_many(handle, inputs, driver=driver)
with driver.database.connection() as conn:
    pid = conn.execute("select pg_backend_pid()").fetchone()[0]
raw = {raw!r}
if raw:
    conn = psycopg.connect({dsn!r})
    pid = conn.execute("select pg_backend_pid()").fetchone()[0]
    conn.commit()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started, cpu, server = time.perf_counter(), time.process_time(), backend_cpu(pid)
if raw:
    with conn.cursor() as cur, cur.copy("copy {schema}.jobs (name, queue, state, payload, idempotency_key, tenant, "
                                        "priority, max_attempts, run_at, created_at) from stdin") as copy:
        for n in range({jobs}):
            copy.write_row(("noop", "bench", "ready", str(n), str(n), None, 0, 5, "now", "now"))
    conn.commit()
else:
    enqueue_many(handle, inputs, driver=driver)
elapsed = time.perf_counter() - started
print({jobs} / elapsed, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024.0,
      (time.process_time() - cpu) * 1e6 / {jobs}, (backend_cpu(pid) - server) * 1e6 / {jobs})
"""


KINDS = ("fresh", "window", "repeated", "held")


def backend_cpu(pid: int) -> float:
    """CPU seconds a server backend has used (``/proc``); NaN when it is not on this machine."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def enqueue_bulk(dsn: str, jobs: int, *, raw: bool = False, kind: str = "fresh") -> tuple[float, float, float, float]:
    """(jobs/s, MiB of client memory the call added at its peak, client CPU us/job, server
    backend CPU us/job) for ONE ``enqueue_many`` call of ``jobs`` inputs of ``kind`` (see the
    module's doc), in a fresh process so its peak is its own; ``raw``: a ``COPY`` of the same
    rows in one transaction instead."""
    schema = fresh_schema(dsn)
    code = _BULK.format(bench=str(BENCH), dsn=dsn, schema=schema, jobs=jobs, raw=raw, kind=kind)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(BENCH)).stdout
    drop_schema(dsn, schema)
    rate, peak, client, server = (float(x) for x in out.split())
    return rate, peak, client, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kind", choices=KINDS, default="fresh", help="the bulk call's inputs (see above)")
    args = parser.parse_args()
    single: list[tuple[float, float]] = []
    bulk: dict[str, list[tuple[float, float, float, float]]] = {"raw": [], "xjobs": []}
    for _ in range(args.runs):   # the rows alternate, so a busy second of the machine hits both
        if args.kind == "fresh":   # the single-row rows do not depend on the kind
            single.append(enqueue_single(args.dsn, 2_000))
        bulk["raw"].append(enqueue_bulk(args.dsn, args.jobs, raw=True))
        bulk["xjobs"].append(enqueue_bulk(args.dsn, args.jobs, kind=args.kind))
    med = statistics.median
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"Enqueue, median of {args.runs} runs; {os.cpu_count()} cores, load average {load} at the end")
    print(f"{'enqueue':<48} {'jobs/s':>9} {'vs raw':>7} {'client us/job':>14} {'server us/job':>14}")
    if single:
        raw_single, one = med(r for r, _ in single), med(x for _, x in single)
        print(f"{'raw single-row INSERT, one transaction each':<48} {raw_single:>9,.0f} {1:>7.2f}")
        print(f"{'enqueue(), one job per call and transaction':<48} {one:>9,.0f} {one / raw_single:>7.2f}"
              f"   (per run: {', '.join(f'{x / r:.2f}' for r, x in single)})")
    raw_rate = med(b[0] for b in bulk["raw"])
    for name, label in (("raw", f"raw COPY of the same {args.jobs:,} rows"), ("xjobs", f"enqueue_many, one call of {args.jobs:,} {args.kind}")):
        rate = med(b[0] for b in bulk[name])
        print(f"{label:<48} {rate:>9,.0f} {rate / raw_rate:>7.2f} {med(b[2] for b in bulk[name]):>14.1f} "
              f"{med(b[3] for b in bulk[name]):>14.1f}   peak +{med(b[1] for b in bulk[name]):.0f} MiB")
    print(f"(enqueue_many per run: {', '.join(f'{b[0]:,.0f}' for b in bulk['xjobs'])} jobs/s; ratios to the raw "
          f"COPY of the same run: {', '.join(f'{x[0] / r[0]:.2f}' for r, x in zip(bulk['raw'], bulk['xjobs']))})")


if __name__ == "__main__":
    main()
