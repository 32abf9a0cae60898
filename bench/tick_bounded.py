"""A tick-only deployment over many ticks on PostgreSQL: what each growing table holds, and
what a tick costs, while every tick enqueues jobs, stages outbox rows and sends events, and the
database's clock (the driver's injected one) steps an hour between ticks, past the retention.

    python bench/tick_bounded.py --ticks 1000

The suite runs the same loop 1,000 times on the memory driver and 300 times here
(``tests/worker/test_tick_bounded.py``); this is the thousand on PostgreSQL. Bounded means the
columns stop growing once the first retention has passed: what a tick writes, a later one
prunes (the run counts are kept two days, 48 of these hours).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

import psycopg

import xjobs
import xjobs.tick
from daemon import drop_schema, fresh_schema
from xjobs.clock import ManualClock
from xjobs.config import Settings
from xjobs.context import Ctx
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.outbox import stage_many
from xjobs.tick import run_tick

HOUR_MS = 3_600_000.0
HALF_HOUR_MS = 1_800_000.0
TABLES = ("jobs", "job_history", "job_steps", "outbox", "events", "job_rates")


def sizes(conn: psycopg.Connection, schema: str) -> dict[str, int]:
    return {t: int(conn.execute(f"select count(*) from {schema}.{t}").fetchone()[0])  # type: ignore[index]
            for t in TABLES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--ticks", type=int, default=1000)
    parser.add_argument("--per-tick", type=int, default=4, help="jobs, staged rows and events before each tick")
    args = parser.parse_args()
    # the pass's quiet checks at their shortest, as the suite's test sets them: an idle tick
    # ends in tens of milliseconds instead of the few hundred a deployment can spare
    xjobs.tick._IDLE_CHECK_MS = xjobs.tick._TICK_POLL_MS = 10.0
    registry = xjobs.Registry()

    def work(ctx: Ctx, input: dict) -> int:
        return int(ctx.step.run("double", lambda: input["n"] * 2))
    handle = xjobs.job(queue="q", idempotency_key=lambda i: f"w:{i['n']}", tenant="none",
                       registry=registry, name="work")(work)
    settings = Settings(retention_completed_ms=HALF_HOUR_MS, retention_finished_ms=HALF_HOUR_MS,
                        outbox_retention_ms=HALF_HOUR_MS, event_retention_ms=HALF_HOUR_MS)
    schema = fresh_schema(args.dsn)
    clock = ManualClock()
    driver = PostgresDriver(args.dsn, schema=schema, clock=clock)
    n = itertools.count()
    seen: list[dict[str, int]] = []
    costs: list[float] = []
    published = pruned = 0
    try:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for _ in range(args.ticks):
                enqueue_many(handle, [{"n": next(n)} for _ in range(args.per_tick)], driver=driver)
                stage_many(None, handle, [{"n": next(n)} for _ in range(args.per_tick)], driver=driver)
                for _ in range(args.per_tick):
                    xjobs.send_event("tick.bench", key=str(next(n)), payload={}, driver=driver)
                began = time.perf_counter()
                steps = itertools.count()
                summary = run_tick(driver=driver, registry=registry, settings=settings, deadline_s=3600,
                                   clock=lambda: next(steps) * 100.0, identity="tick-bench")
                costs.append((time.perf_counter() - began) * 1000.0)
                assert not summary.failed, summary.as_json()
                published += summary.outbox["published"]
                pruned += (summary.upkeep.get("pruned") or {}).get("jobs", 0)
                seen.append(sizes(conn, schema))
                clock.advance(HOUR_MS)
    finally:
        driver.close()
        drop_schema(args.dsn, schema)
    marks = sorted({min(t, args.ticks) for t in (1, 10, 50, 100, 250, 500, 750, args.ticks)})
    print(f"{args.ticks} ticks on PostgreSQL, {args.per_tick} jobs + {args.per_tick} staged rows + "
          f"{args.per_tick} events before each; published {published}, pruned {pruned} jobs")
    print(f"{'after tick':>10} " + " ".join(f"{t:>11}" for t in TABLES))
    for mark in marks:
        print(f"{mark:>10} " + " ".join(f"{seen[mark - 1][t]:>11}" for t in TABLES))
    settled = seen[min(100, len(seen) - 1):]
    print(f"{'max 100..':>10} " + " ".join(f"{max(s[t] for s in settled):>11}" for t in TABLES))
    print(f"tick cost ms: median {statistics.median(costs):.1f}, "
          f"p95 {sorted(costs)[int(len(costs) * 0.95) - 1]:.1f}, max {max(costs):.1f}")


if __name__ == "__main__":
    main()
