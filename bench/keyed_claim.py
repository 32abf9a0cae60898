"""What concurrency by key costs a claim and its settlement, against the plain claim in the same run.

Four queues of one schema, each claimed and completed one job at a time ``--claims`` times
(the claim statement and the ack timed apart, median and p99):

* ``raw``: the claim as one hand-written statement (``for update skip locked``, the
  ``jobs_ready_idx`` order), completed by a bare update: the least a claim can cost here;
* ``plain``: ``--rows`` ready jobs with no key, through the driver (``job_claim``, ``job_ack``);
* ``keyed``: ``--rows`` members of a job with ``concurrency=2`` over ``--keys`` keys: two of
  each key are ready, the rest wait; each ack lets the key's next member in, in its statement;
* ``sequence``: one key of ``--sequence`` members of a sequence (``concurrency=1``): one member
  ready, every other waiting; each ack lets the next in;
* ``untriggered``: the plain queue on a second schema whose keys' statement triggers are dropped,
  claimed in rounds alternating with ``plain``: what the triggers cost jobs that have no key.

The waiting members are suspended until 9999-12-31, outside every index a claim reads, so the
keyed claim should cost what the plain one does however long a sequence grows; the ack pays
for letting the next member in (the key's lock, its holders and its first waiter, each read
through a partial index that holds only them).

    python bench/keyed_claim.py [--dsn URL] [--rows 100000] [--keys 10000] [--sequence 18000] [--claims 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import psycopg

from daemon import drop_schema, fresh_schema, percentile
from xjobs.drivers.base import Claim, NewJob
from xjobs.drivers.postgres import PostgresDriver
from xjobs.payload import encode_payload

RAW_CLAIM = """
with picked as (
    select id from {schema}.jobs
    where state = 'ready' and queue = 'raw' and run_at <= now()
    order by priority, run_at, id limit 1 for update skip locked)
update {schema}.jobs j set state = 'running', attempt = j.attempt + 1, lease_token = 1, claimed_by = 'raw',
    started_at = now(), lease_expires_at = now() + interval '30 seconds'
where j.id = any(array(select id from picked))
returning j.id
"""
RAW_ACK = ("update {schema}.jobs set state = 'completed', finished_at = now(), lease_token = null, "
           "lease_expires_at = null where id = %s and state = 'running'")


def jobs(queue: str, n: int, *, keys: int | None = None, cap: int = 2) -> list[NewJob]:
    plain = [NewJob(name=f"{queue}_job", queue=queue, payload=encode_payload({"n": i}), idempotency_key=str(i))
             for i in range(n)]
    if keys is None:
        return plain
    return [job._replace(concurrency_key=f"k{i % keys}", key_cap=cap, key_hold=cap == 1)
            for i, job in enumerate(plain)]


def fill(driver: PostgresDriver, batch: list[NewJob]) -> float:
    began = time.perf_counter()
    for start in range(0, len(batch), 5000):
        driver.job_enqueue(batch[start:start + 5000])
    return time.perf_counter() - began


def through_driver(driver: PostgresDriver, queue: str, claims: int) -> tuple[list[float], list[float]]:
    claim_ms, ack_ms = [], []
    for _ in range(claims):
        began = time.perf_counter()
        [job] = driver.job_claim(Claim([queue], 1, 30_000.0, "bench"))
        claimed = time.perf_counter()
        assert driver.job_ack(job.id, job.token)
        claim_ms.append((claimed - began) * 1000.0)
        ack_ms.append((time.perf_counter() - claimed) * 1000.0)
    return claim_ms, ack_ms


def raw(dsn: str, schema: str, claims: int) -> tuple[list[float], list[float]]:
    claim_ms, ack_ms = [], []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(claims):
            began = time.perf_counter()
            [(job_id,)] = conn.execute(RAW_CLAIM.format(schema=schema)).fetchall()
            claimed = time.perf_counter()
            conn.execute(RAW_ACK.format(schema=schema), (job_id,))
            claim_ms.append((claimed - began) * 1000.0)
            ack_ms.append((time.perf_counter() - claimed) * 1000.0)
    return claim_ms, ack_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--sequence", type=int, default=18_000)
    parser.add_argument("--claims", type=int, default=2_000)
    args = parser.parse_args()
    schema = fresh_schema(args.dsn)
    driver = PostgresDriver(args.dsn, schema=schema)
    try:
        filled = {"raw": fill(driver, jobs("raw", args.rows)), "plain": fill(driver, jobs("plain", args.rows)),
                  "keyed": fill(driver, jobs("keyed", args.rows, keys=args.keys)),
                  "sequence": fill(driver, jobs("sequence", args.sequence, keys=1, cap=1))}
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f"analyze {schema}.jobs")
            waiting = dict(conn.execute(f"select queue, count(*) from {schema}.jobs where state = 'suspended' "
                                        f"group by queue").fetchall())
        through_driver(driver, "plain", 50)   # warm the prepared statements and the pool
        results: dict[str, tuple[list[float], list[float]]] = {"raw": raw(args.dsn, schema, args.claims)}
        for queue in ("keyed", "sequence"):
            results[queue] = through_driver(driver, queue, min(args.claims, args.sequence - 1)
                                            if queue == "sequence" else args.claims)
        # what the keys' triggers cost the claims and acks of jobs that have no key: the plain
        # queue here and on a second schema whose statement triggers are dropped, in alternating
        # rounds, so the machine's drift falls on both alike
        bare = fresh_schema(args.dsn)
        bare_driver = PostgresDriver(args.dsn, schema=bare)
        try:
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                for trigger in ("jobs_key_settle_update", "jobs_key_settle_insert", "jobs_key_settle_delete"):
                    conn.execute(f"drop trigger {trigger} on {bare}.jobs")
            filled["untriggered"], waiting["untriggered"] = fill(bare_driver, jobs("plain", args.rows)), 0
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f"analyze {bare}.jobs")
            through_driver(bare_driver, "plain", 50)
            results["plain"], results["untriggered"] = ([], []), ([], [])
            for _ in range(10):
                for name, on in (("plain", driver), ("untriggered", bare_driver)):
                    claim_ms, ack_ms = through_driver(on, "plain", args.claims // 10)
                    results[name][0].extend(claim_ms)
                    results[name][1].extend(ack_ms)
        finally:
            bare_driver.close()
            drop_schema(args.dsn, bare)
    finally:
        driver.close()
        drop_schema(args.dsn, schema)

    base = percentile(results["plain"][0], 0.5)
    raw_claim = percentile(results["raw"][0], 0.5)
    print(f"claim and ack, one job at a time: {args.rows:,} rows per queue, {args.keys:,} keys, "
          f"a sequence of {args.sequence:,}\n")
    print(f"{'queue':<10} {'rows':>8} {'waiting':>8} {'enqueue s':>10} {'claim p50':>10} {'claim p99':>10} "
          f"{'ack p50':>8} {'ack p99':>8} {'vs plain':>9} {'vs raw':>7}")
    for queue in ("raw", "plain", "untriggered", "keyed", "sequence"):
        claim_ms, ack_ms = results[queue]
        rows = args.sequence if queue == "sequence" else args.rows
        p50 = percentile(claim_ms, 0.5)
        print(f"{queue:<10} {rows:>8,} {waiting.get(queue, 0):>8,} {filled[queue]:>10.2f} {p50:>8.3f}ms "
              f"{percentile(claim_ms, 0.99):>8.3f}ms {percentile(ack_ms, 0.5):>6.3f}ms "
              f"{percentile(ack_ms, 0.99):>6.3f}ms {p50 / base:>8.2f}x {p50 / raw_claim:>6.2f}x")


if __name__ == "__main__":
    main()
