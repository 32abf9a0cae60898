"""Fair claims across tenants against claims in arrival order, and what a fair claim costs.

(a) The skew case, through ``xjobsd`` (``--queue fair=1xC`` or ``--queue fifo=1xC``, the
1-ms bodies of ``noop_app``): tenant A enqueues ``--backlog`` jobs; once the daemon is working
through them, tenants B..K enqueue ``--each`` jobs each. Printed per mode: the longest start
delay of a B..K job (``started_at - created_at``, the server's clock), when the last of them
started after they were enqueued, and A's throughput (its jobs / its first start to its last
finish) against A's throughput when A is alone in the same mode.

(b) The claim itself, in this process on one connection: ``--claims`` claims of ``--limit``
jobs each from a backlog of ``--backlog`` jobs (the cases take turns), each claim's time
(median, p99). The fair
claim with the backlog spread over as many tenants as jobs and with one tenant; the plain
claim (``job_claim``); and the raw claim (``for update skip locked`` on the same table, the
claim's update and nothing else) as the baseline.

(c) What the rotation's trigger costs an enqueue: the one-tenant backlogs of (b), enqueued with
``enqueue_many``, plain and fair.

    python bench/fair_claims.py [--dsn URL] [--backlog 100000] [--each 100] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import psycopg

from daemon import Daemon, drop_schema, fresh_schema, percentile, wait_drained
from xjobs.drivers.base import Claim
from xjobs.drivers.fair import FairClaim
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many

OTHERS = [chr(c) for c in range(ord("B"), ord("K") + 1)]
ENQUEUED: dict[str, float] = {}   # jobs/s of the one-tenant backlogs' enqueue_many, plain and fair


def enqueue(driver: PostgresDriver, handle, tenant: str, n: int, chunk: int = 10_000) -> None:
    for start in range(0, n, chunk):
        enqueue_many(handle, [{"t": tenant, "n": i} for i in range(start, min(n, start + chunk))], driver=driver)


def skew(dsn: str, mode: str, backlog: int, each: int, concurrency: int, others: bool) -> dict[str, float]:
    import noop_app
    handle = noop_app.ms_fair if mode == "fair" else noop_app.ms_fifo
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema)
    try:
        enqueue(driver, handle, "A", backlog)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"analyze {schema}.jobs")
            with Daemon(dsn, schema, [f"{mode}=1x{concurrency}"]) as daemon:
                daemon.wait_ready()
                if others:   # once A's backlog is being worked through
                    while conn.execute(f"select count(*) from {schema}.jobs where state = 'completed'"
                                       ).fetchone()[0] < min(2_000, backlog // 10):
                        time.sleep(0.05)
                    for tenant in OTHERS:
                        enqueue(driver, handle, tenant, each)
                wait_drained(dsn, schema, timeout=1800)
            a_began, a_ended, a_done = conn.execute(
                f"select min(started_at), max(finished_at), count(*) from {schema}.jobs "
                f"where tenant = 'A' and state = 'completed'").fetchone()
            assert a_done == backlog, a_done
            out = {"a_rate": backlog / (a_ended - a_began).total_seconds()}
            if others:
                delay, spread, done = conn.execute(
                    f"select extract(epoch from max(started_at - created_at)), "
                    f"extract(epoch from max(started_at) - min(created_at)), count(*) from {schema}.jobs "
                    f"where tenant <> 'A' and state = 'completed'").fetchone()
                assert done == each * len(OTHERS), done
                out |= {"max_delay": float(delay), "last_start": float(spread)}
            return out
    finally:
        driver.close()
        drop_schema(dsn, schema)


RAW_CLAIM = """
with picked as (
    select id from {schema}.jobs where state = 'ready' and queue = %(queue)s
    order by priority, run_at, id limit %(limit)s for update skip locked)
update {schema}.jobs set state = 'running', lease_token = 1, started_at = now(),
    lease_expires_at = now() + interval '5 minutes'
where id = any(array(select id from picked)) returning id"""


def claim_costs(dsn: str, backlog: int, claims: int, limit: int) -> dict[str, list[float]]:
    import noop_app
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema, pool_size=1)
    timed: dict[str, list[float]] = {}
    try:
        for label, handle in (("plain", noop_app.ms_fifo), ("fair", noop_app.ms_fair)):
            began = time.perf_counter()
            enqueue(driver, handle, "A", backlog)
            ENQUEUED[label] = backlog / (time.perf_counter() - began)
        rows = [{"t": f"t{i:06d}", "n": i} for i in range(backlog)]
        with driver.database.connect() as conn:
            # the same job in a queue of its own: the many-tenant backlog beside the one-tenant one
            for start in range(0, backlog, 10_000):
                driver.job_enqueue(_many_tenant_jobs(rows[start:start + 10_000]))
            conn.execute(f"analyze {schema}.jobs")
            conn.execute(f"analyze {schema}.fair_tenants")
            raw = RAW_CLAIM.replace("{schema}", schema)
            cases = {
                "raw claim (baseline)": lambda: conn.execute(raw, {"queue": "fifo", "limit": limit}).fetchall(),
                "plain claim, 1 tenant": lambda: driver.job_claim(Claim(["fifo"], limit, 300_000.0, "bench")),
                "fair claim, 1 tenant": lambda: driver.fair.job_claim_fair(FairClaim("fair", limit, 300_000.0, "bench")),
                f"fair claim, {backlog:,} tenants": lambda: driver.fair.job_claim_fair(
                    FairClaim("fair_many", limit, 300_000.0, "bench")),
            }
            # the cases take turns, claim by claim, so a busy moment of the machine weighs on all alike
            timed = {name: [] for name in cases}
            for _ in range(claims):
                for name, run in cases.items():
                    began = time.perf_counter()
                    got = run()
                    timed[name].append((time.perf_counter() - began) * 1000.0)
                    assert len(got) == limit, (name, len(got))
    finally:
        driver.close()
        drop_schema(dsn, schema)
    return timed


def _many_tenant_jobs(rows):
    import noop_app
    from xjobs.enqueue import build_jobs   # the one place a NewJob is made from an input
    return [job._replace(queue="fair_many")
            for job in build_jobs(noop_app.ms_fair, rows, max_payload_bytes=1 << 20)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--each", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--claims", type=int, default=2_000)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--skip-skew", action="store_true")
    args = parser.parse_args()

    if not args.skip_skew:
        print(f"(a) skew: A enqueues {args.backlog:,} 1-ms jobs, then B..K {args.each} each; "
              f"xjobsd --queue MODE=1x{args.concurrency}")
        print(f"{'mode':<6} {'B..K max start delay':>22} {'B..K all started':>18} {'A jobs/s':>10} "
              f"{'A alone jobs/s':>15} {'A vs alone':>11}")
        for mode in ("fifo", "fair"):
            alone = skew(args.dsn, mode, args.backlog, args.each, args.concurrency, others=False)
            mixed = skew(args.dsn, mode, args.backlog, args.each, args.concurrency, others=True)
            print(f"{mode:<6} {mixed['max_delay']:>20.2f} s {mixed['last_start']:>16.2f} s {mixed['a_rate']:>10.0f} "
                  f"{alone['a_rate']:>15.0f} {mixed['a_rate'] / alone['a_rate']:>11.2f}")
        print()
    print(f"(b) one claim of {args.limit} from a backlog of {args.backlog:,} ({args.claims:,} claims each)")
    timed = claim_costs(args.dsn, args.backlog, args.claims, args.limit)
    base = statistics.median(timed["raw claim (baseline)"])
    print(f"{'claim':<28} {'median ms':>10} {'p99 ms':>8} {'vs raw':>7}")
    for name, samples in timed.items():
        median = statistics.median(samples)
        print(f"{name:<28} {median:>10.3f} {percentile(samples, 0.99):>8.3f} {median / base:>7.2f}")
    print()
    print(f"(c) enqueue_many of {args.backlog:,} jobs of one tenant, chunks of 10,000")
    print(f"{'job':<8} {'jobs/s':>8} {'vs plain':>9}")
    for label, rate in ENQUEUED.items():
        print(f"{label:<8} {rate:>8.0f} {rate / ENQUEUED['plain']:>9.2f}")


if __name__ == "__main__":
    main()
