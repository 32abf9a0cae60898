"""What a priority-aging pass (``job_age``, ``job(aging=)``) costs over a large backlog, and what
a claim costs beside it, against a bare probe of the ready index in the same run.

One queue of ``--rows`` ready jobs spread over nine priority levels (1 to 9, floor 0, a step
of one hour), each case timed ``--passes`` times (median and p99):

* ``raw probe``: ``select ... order by priority, run_at, id limit 1`` on the ready index: the
  least any read of the queue costs here (the baseline);
* ``claim``: ``job_claim`` of one job then its ``job_ack``, timed apart from the ack (before
  any aging, and again after the ``due`` case's passes rewrote priorities);
* ``none due``: every row waited less than a step: a pass that moves nothing;
* ``1,000 due``: the same, but ``--due`` rows of one level waited two steps (put back after
  each pass, outside the timing): a pass that moves them;
* ``aged, none due``: the backlog filled again, every row a level down already
  (``base_priority`` one above) and between one and two steps old: each level's oldest rows
  pass the step cut and are read but none moves, the most a pass reads without moving anything.

Each backlog is inserted whole and vacuumed before it is timed: rewriting a million rows in place
would leave a million dead index entries that the passes would walk until a vacuum removes them.

    python bench/aging.py [--dsn URL] [--rows 1000000] [--due 1000] [--passes 20]
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

from daemon import drop_schema, fresh_schema, percentile
from xjobs.drivers.base import Aging, Claim, ListFilter
from xjobs.drivers.postgres import PostgresDriver

QUEUE = "aging"
STEP_MS = 3_600_000.0
PROBE = ("select id from {schema}.jobs where state = 'ready' and queue = 'aging' and run_at <= now() "
         "order by priority, run_at, id limit 1")
# the backlog: nine levels, every row under a step old (nothing due); with %(aged)s, every row a
# level down already (base_priority one above) and between one and two steps old: read, not moved
FILL = """
insert into {schema}.jobs (name, queue, state, payload, idempotency_key, priority, base_priority, max_attempts,
                           run_at, created_at)
select 'aging_job', 'aging', 'ready', '{{}}'::jsonb, g::text, 1 + g %% 9,
       case when %(aged)s then 2 + g %% 9 end, 3,
       now() - (g %% 3000) * interval '1 second' - case when %(aged)s then interval '1 hour' else interval '0' end,
       now()
from generate_series(1, %(rows)s) g
"""
# rows of one level two steps old: due, two levels each; put back after each pass
DUE = ("update {schema}.jobs set run_at = now() - interval '2 hours' "
       "where id in (select id from {schema}.jobs where priority = 5 order by id limit %(due)s)")
PUT_BACK = ("update {schema}.jobs set run_at = now() - interval '2 hours', priority = 5, base_priority = null "
            "where base_priority = 5")


def timed(call, passes: int, between=None) -> tuple[list[float], object]:
    samples, answer = [], None
    for _ in range(passes):
        if between is not None:
            between()
        began = time.perf_counter()
        answer = call()
        samples.append((time.perf_counter() - began) * 1000.0)
    return samples, answer


def row(name: str, samples: list[float], moved: object, baseline: float) -> str:
    median = percentile(samples, 0.5)
    return (f"| {name:<24} | {str(moved):>6} | {median:9.3f} | {percentile(samples, 0.99):9.3f} | "
            f"{median / baseline:8.1f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    schema = fresh_schema(args.dsn)
    driver = PostgresDriver(args.dsn, schema=schema, pool_size=1)
    aging = Aging(QUEUE, STEP_MS, 0)
    try:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            def run(sql: str, **params: object) -> None:
                conn.execute(sql.format(schema=schema), params or None)
            def fill(aged: bool) -> None:
                run(f"truncate {schema}.jobs cascade")
                run(FILL, rows=args.rows, aged=aged)
                run(f"vacuum analyze {schema}.jobs")
            fill(aged=False)
            probe = PROBE.format(schema=schema)
            raw, _ = timed(lambda: conn.execute(probe).fetchall(), args.passes * 5)
            baseline = percentile(raw, 0.5)

            def claim_rounds() -> list[float]:
                samples = []
                for _ in range(args.passes * 5):
                    began = time.perf_counter()
                    [job] = driver.job_claim(Claim([QUEUE], 1, 30_000.0, "bench"))
                    samples.append((time.perf_counter() - began) * 1000.0)
                    driver.job_ack(job.id, job.token)
                return samples

            lines = [row("raw probe", raw, "-", baseline), row("claim, before aging", claim_rounds(), 1, baseline)]
            samples, moved = timed(lambda: driver.job_age(aging), args.passes)
            lines.append(row("pass, none due", samples, moved, baseline))
            run(DUE, due=args.due)
            samples, moved = timed(lambda: driver.job_age(aging), args.passes, between=lambda: run(PUT_BACK))
            lines.append(row(f"pass, {args.due:,} due", samples, moved, baseline))
            lines.append(row("claim, after aging", claim_rounds(), 1, baseline))
            fill(aged=True)
            samples, moved = timed(lambda: driver.job_age(aging), args.passes)
            lines.append(row("pass, aged, none due", samples, moved, baseline))
            left = len(driver.job_list(ListFilter(queue=QUEUE, state="ready", limit=1)))
        print(f"\n{args.rows:,} ready rows over 9 levels, step 1h, {args.passes} passes per case "
              f"(ready rows left: {'yes' if left else 'no'})\n")
        print("| case                     |  moved | median ms |    p99 ms | vs probe |")
        print("|--------------------------|--------|-----------|-----------|----------|")
        print("\n".join(lines))
    finally:
        driver.close()
        drop_schema(args.dsn, schema)


if __name__ == "__main__":
    main()
