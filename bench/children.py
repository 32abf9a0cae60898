"""A fan-out/fan-in of child jobs through ``xjobsd``, against a plain drain in the same run.

A ``fan_out`` parent (``noop_app``) maps over ``--children`` no-op children on
``xjobsd --queue bench=256 --queue fan=1x4``: one bulk insert per chunk of children in the
parent's transaction, one statement per child settlement (the fan-in trigger), one wake. Per
round it reports children/s end to end (the parent's first start to its completion, on the
server's clock) and the parent's resume delay: from the settlement of its last child
(``fanins.settled_at``) to its claim again (``jobs.started_at``). Then the same number of
plain no-op jobs drained by the same daemon configuration (``bench/daemon.py``).

    python bench/children.py [--dsn URL] [--children 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time

import psycopg

from daemon import Daemon, daemon_drain, drop_schema, fresh_schema, percentile
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many


def fan_rounds(dsn: str, children: int, rounds: int) -> list[tuple[float, float]]:
    """(children/s, resume delay ms) of each round, one parent at a time."""
    import noop_app
    schema = fresh_schema(dsn)
    driver = PostgresDriver(dsn, schema=schema)
    measured = []
    try:
        with Daemon(dsn, schema, ["bench=256", "fan=1x4"]) as daemon, psycopg.connect(dsn, autocommit=True) as conn:
            daemon.wait_ready()
            for n in range(rounds):
                [parent] = enqueue_many(noop_app.fan_out, [{"round": n, "n": children}], driver=driver)
                assert parent.result(600, driver=driver) == children
                row = conn.execute(
                    f"select extract(epoch from j.finished_at - h.first_start), "
                    f"extract(epoch from j.started_at - f.settled_at) * 1000, f.woken "
                    f"from {schema}.jobs j join {schema}.fanins f on f.parent_id = j.id, "
                    f"(select min(at) as first_start from {schema}.job_history "
                    f" where job_id = %s and outcome = 'started') h where j.id = %s",
                    (parent.id, parent.id)).fetchone()
                if row is None or row[0] is None:   # no 'started' history: the claim's own time
                    row = conn.execute(
                        f"select extract(epoch from j.finished_at - j.created_at), "
                        f"extract(epoch from j.started_at - f.settled_at) * 1000, f.woken "
                        f"from {schema}.jobs j join {schema}.fanins f on f.parent_id = j.id where j.id = %s",
                        (parent.id,)).fetchone()
                assert row is not None and row[2] == 1, row
                measured.append((children / float(row[0]), float(row[1])))
    finally:
        driver.close()
        drop_schema(dsn, schema)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--children", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    began = time.monotonic()
    rounds = fan_rounds(args.dsn, args.children, args.rounds)
    drain = daemon_drain(args.dsn, args.children, ["bench=256"])
    rates = [rate for rate, _ in rounds]
    delays = [delay for _, delay in rounds]
    print(f"{'':28}{'children/s':>12}{'resume ms':>12}")
    for n, (rate, delay) in enumerate(rounds):
        print(f"{'fan-out round ' + str(n + 1):28}{rate:12.0f}{delay:12.1f}")
    print(f"{'plain drain (jobs/s)':28}{drain.rate:12.0f}")
    print(f"\nfan-out p50 {percentile(rates, 0.5):.0f} children/s = "
          f"{percentile(rates, 0.5) / drain.rate:.0%} of the plain drain; "
          f"resume delay p50 {percentile(delays, 0.5):.1f} ms, max {max(delays):.1f} ms "
          f"({time.monotonic() - began:.0f} s in all)")


if __name__ == "__main__":
    main()
