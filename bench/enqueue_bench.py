"""Enqueue, for ``throughput.py``: one job per ``enqueue()`` call and transaction against a raw
single-row ``INSERT`` on the same table, and ONE ``enqueue_many`` call of N inputs in a fresh
process, with the client memory that call added at its peak.
"""

from __future__ import annotations

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
import resource, sys, time
sys.path.insert(0, {bench!r})
import noop_app
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
driver = PostgresDriver({dsn!r}, schema={schema!r})
enqueue_many(noop_app.noop, [-1], driver=driver)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
enqueue_many(noop_app.noop, range({jobs}), driver=driver)
elapsed = time.perf_counter() - started
print({jobs} / elapsed, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024.0)
"""


def enqueue_bulk(dsn: str, jobs: int) -> tuple[float, float]:
    """(jobs/s, MiB of client memory the call added at its peak) for ONE ``enqueue_many`` call
    of ``jobs`` inputs, in a fresh process so its peak is its own."""
    schema = fresh_schema(dsn)
    code = _BULK.format(bench=str(BENCH), dsn=dsn, schema=schema, jobs=jobs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    drop_schema(dsn, schema)
    rate, peak = out.split()
    return float(rate), float(peak)
