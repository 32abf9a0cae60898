"""What a debounced enqueue costs: one call at a time, against a plain enqueue and a raw upsert.

    python bench/debounce.py [--dsn URL] [--calls 5000] [--per-key 100] [--rounds 3]

Each row makes ``--calls`` enqueue calls of one input each, one round trip at a time, into a
fresh schema:

* ``enqueue, new keys``: every call inserts a job (the floor of an enqueue);
* ``enqueue, held keys (dedupe)``: ``--per-key`` calls per key of a job without debounce: the
  insert conflicts and ``job_find_holder`` answers the holder;
* ``debounced, held keys``: the same calls to a job with ``debounce="10s"``: the insert
  conflicts and ``job_debounce`` moves the holder (the newest input, a later start);
* ``raw upsert``: the same calls as ``insert ... on conflict do update`` of the payload and
  the due time in a table of its own, one autocommitted statement each: what a hand-written
  debounce costs.

It prints calls per second (the best of ``--rounds``) and each row's ratio to the raw upsert.
Nothing is asserted: timings go to this table.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import psycopg

import xjobs
from daemon import drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many

REGISTRY = xjobs.Registry()


@xjobs.job(queue="bench", idempotency_key=lambda i: f"k:{i['k']}", tenant="none", registry=REGISTRY)
def plain(ctx, input):  # noqa: ARG001
    return None


@xjobs.job(queue="bench", idempotency_key=lambda i: f"k:{i['k']}", tenant="none", debounce="10s",
           debounce_max="2m", registry=REGISTRY)
def debounced(ctx, input):  # noqa: ARG001
    return None


Row = Callable[[str, str, int, int], float]   # (dsn, schema, calls, per_key) -> seconds


def through_xjobs(handle: xjobs.JobHandle, distinct: bool) -> Row:
    def run(dsn: str, schema: str, calls: int, per_key: int) -> float:
        driver = PostgresDriver(dsn, schema=schema, pool_size=1)
        try:
            began = time.perf_counter()
            for n in range(calls):
                enqueue_many(handle, [{"k": n if distinct else n // per_key, "v": n}], driver=driver)
            return time.perf_counter() - began
        finally:
            driver.close()
    return run


def raw_upsert(dsn: str, schema: str, calls: int, per_key: int) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create table {schema}.raw (k text primary key, payload jsonb not null, "
                     f"created_at timestamptz not null, run_at timestamptz not null)")
        statement = (f"insert into {schema}.raw (k, payload, created_at, run_at) "
                     f"values (%s, %s::jsonb, now(), now() + interval '10 seconds') "
                     f"on conflict (k) do update set payload = excluded.payload, "
                     f"run_at = least(now() + interval '10 seconds', raw.created_at + interval '2 minutes')")
        began = time.perf_counter()
        for n in range(calls):
            conn.execute(statement, (f"k:{n // per_key}", f'{{"k": {n // per_key}, "v": {n}}}'))
        return time.perf_counter() - began


ROWS: list[tuple[str, Row]] = [
    ("enqueue, new keys", through_xjobs(plain, distinct=True)),
    ("enqueue, held keys (dedupe)", through_xjobs(plain, distinct=False)),
    ("debounced, held keys", through_xjobs(debounced, distinct=False)),
    ("raw upsert", raw_upsert),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--per-key", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for label, row in ROWS:
            schema = fresh_schema(args.dsn)
            try:
                seconds = row(args.dsn, schema, args.calls, args.per_key)
            finally:
                drop_schema(args.dsn, schema)
            best[label] = min(best.get(label, seconds), seconds)
    raw = args.calls / best["raw upsert"]
    print(f"{args.calls} calls, {args.per_key} per held key, best of {args.rounds}")
    print(f"{'row':32} {'calls/s':>9} {'vs raw':>7}")
    for label, _ in ROWS:
        rate = args.calls / best[label]
        print(f"{label:32} {rate:9.0f} {rate / raw:7.2f}")


if __name__ == "__main__":
    main()
