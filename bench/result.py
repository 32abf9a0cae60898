"""How soon ``Enqueued.result()`` returns once the body of its job returned, through ``xjobsd``.

One ``answer`` job at a time runs on an idle ``xjobsd --queue answer=1x4``; the body waits
``--body-ms`` (so the caller is already waiting, as a caller of ``result()`` usually is), reports
the monotonic clock just before it returns (``noop_app.answer``; one clock for every process
on the machine), and the time runs from there to ``result()`` returning its value in this
process: the worker's batched ack with the result, its commit, the settled notification, the
waiter's read of the row. Against the raw loop (``bench/cancel.py``'s): one session LISTENs,
another updates a row and NOTIFYs in one transaction, the listener reads the row back.

Drain throughput with the settled notifications: ``--drain`` no-op jobs through
``xjobsd --queue bench=256`` (``bench/daemon.py``), jobs/s; run it on the code before this
change for the comparison.

    python bench/result.py [--dsn URL] [--samples 100] [--body-ms 50] [--drain 50000]
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from cancel import raw_notify_round_trip
from daemon import Daemon, daemon_drain, drop_schema, fresh_schema, percentile
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many


def completion_to_result(dsn: str, samples: int, body_ms: float, warmup: int = 5) -> list[float]:
    """Milliseconds from each body's return to its ``Enqueued.result()`` returning."""
    import noop_app
    schema = fresh_schema(dsn)
    with noop_app.pings() as sock:
        sock.settimeout(60)
        driver = PostgresDriver(dsn, schema=schema)
        try:
            with Daemon(dsn, schema, ["answer=1x4"]) as daemon:
                daemon.wait_ready()
                latencies = []
                for n in range(warmup + samples):
                    [job] = enqueue_many(noop_app.answer, [{"n": n, "ms": body_ms}], driver=driver)
                    got = job.result(60, driver=driver)
                    answered = time.monotonic()
                    returned = noop_app.started(sock, n)
                    assert got == {"n": n, "ok": True}, got
                    if n >= warmup:
                        latencies.append((answered - returned) * 1000.0)
        finally:
            driver.close()
            drop_schema(dsn, schema)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--body-ms", type=float, default=50.0)
    parser.add_argument("--drain", type=int, default=50_000, help="no-op jobs to drain (0: skip)")
    args = parser.parse_args()
    rows = [("raw: UPDATE + NOTIFY, LISTEN + read back", raw_notify_round_trip(args.dsn, args.samples)),
            ("xjobsd: body returns to result() returns", completion_to_result(args.dsn, args.samples, args.body_ms))]
    raw = percentile(rows[0][1], 0.5)
    print(f"completion to Enqueued.result(), {args.samples} runs, body {args.body_ms:g} ms")
    print(f"{'latency (ms)':<46} {'p50':>9} {'p99':>9} {'max':>9} {'vs raw':>7}")
    for name, samples in rows:
        print(f"{name:<46} {percentile(samples, 0.5):>9.2f} {percentile(samples, 0.99):>9.2f} "
              f"{max(samples):>9.2f} {percentile(samples, 0.5) / raw:>7.1f}")
    if args.drain:
        drain = daemon_drain(args.dsn, args.drain, ["bench=256"])
        print(f"\ndrain of {args.drain:,} no-op jobs, xjobsd --queue bench=256: {drain.rate:,.0f} jobs/s, "
              f"{drain.statements_per_job:.3f} stmts/job, {drain.wal_per_job:.0f} WAL B/job")


if __name__ == "__main__":
    main()
