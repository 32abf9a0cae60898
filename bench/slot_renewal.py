"""What a worker's renewal pass costs with k capped runs in flight.

A capped run holds a job lease and a fleet-wide slot, renewed apart: ONE ``job_renew_many``
statement for every lease of the process, then one ``slot_renew`` per slot (what the worker
does; its run's safe window ends at the earlier of the two confirmations, which adds no
statement). Against the raw baseline, in the same run: one hand-written statement that
renews the leases AND the slots together (a CTE of both updates), what a merged renewal would
cost. Each row is the median of ``--rounds`` passes, on a fresh schema dropped at the end.

    python bench/slot_renewal.py [--dsn URL] [--rounds 300] [--k 1,3,8,16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import psycopg  # noqa: E402

import xjobs  # noqa: E402
from daemon import drop_schema, fresh_schema  # noqa: E402
from xjobs.drivers.base import Claim, Lease, Slot, SlotRequest  # noqa: E402
from xjobs.drivers.postgres import PostgresDriver  # noqa: E402
from xjobs.enqueue import enqueue_many  # noqa: E402

HOLDER = "bench-holder"
MERGED = """
with l as (
    update {schema}.jobs j set lease_expires_at = statement_timestamp() + interval '60 s'
    from unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) as a(id, token)
    where j.id = any(%(ids)s::bigint[]) and j.id = a.id and j.lease_token = a.token
      and j.state = 'running'
    returning j.id
), s as (
    update {schema}.job_slots set expires_at = statement_timestamp() + interval '60 s'
    where job = %(job)s and slot = any(%(slots)s::int[]) and holder = %(holder)s
      and expires_at > statement_timestamp()
    returning slot
)
select (select count(*) from l), (select count(*) from s)
"""


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000.0


def measure(dsn: str, schema: str, k: int, rounds: int) -> tuple[float, float, float]:
    registry = xjobs.Registry()
    handle = xjobs.job(registry=registry, name=f"capped_{k}", queue=f"q{k}", tenant="none",
                       idempotency_key=lambda i: str(i["n"]), concurrency=k)(lambda ctx, i: None)
    driver = PostgresDriver(dsn, schema=schema, pool_size=2)
    try:
        enqueue_many(handle, [{"n": n} for n in range(k)], driver=driver)
        jobs = driver.job_claim(Claim([f"q{k}"], k, 60_000, HOLDER))
        leases = [Lease(j.id, j.token) for j in jobs]
        slots = [driver.slot_acquire(SlotRequest(handle.name, k, HOLDER, 60_000)) for _ in jobs]
        held = [Slot(handle.name, s, HOLDER) for s in slots if s is not None]
        assert len(leases) == len(held) == k
        apart, merged = [], []
        params = {"ids": [le.job_id for le in leases], "tokens": [le.token for le in leases],
                  "job": handle.name, "slots": [s.slot for s in held], "holder": HOLDER}
        with psycopg.connect(dsn, autocommit=True) as raw:
            for _ in range(rounds):
                started = time.perf_counter()
                driver.job_renew_many(leases, 60_000)
                for slot in held:
                    driver.slot_renew(slot, 60_000)
                apart.append(time.perf_counter() - started)
                started = time.perf_counter()
                raw.execute(MERGED.format(schema=schema), params).fetchall()   # type: ignore[arg-type]
                merged.append(time.perf_counter() - started)
        return median_ms(apart), median_ms(merged), float(1 + k)
    finally:
        driver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--k", default="1,3,8,16", help="capped runs in flight, comma-separated")
    args = parser.parse_args()
    schema = fresh_schema(args.dsn)
    try:
        print(f"{'capped runs':>11}  {'statements':>10}  {'xjobs pass ms':>13}  {'merged (raw) ms':>15}  {'ratio':>5}")
        for k in (int(v) for v in args.k.split(",")):
            apart, merged, statements = measure(args.dsn, schema, k, args.rounds)
            print(f"{k:>11}  {statements:>10.0f}  {apart:>13.3f}  {merged:>15.3f}  {apart / merged:>5.1f}")
    finally:
        drop_schema(args.dsn, schema)


if __name__ == "__main__":
    main()
