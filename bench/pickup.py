"""Pickup latency through ``xjobsd``: from ``enqueue()`` returning to the body's first line.

The body (``noop_app.ping``) reports its start on the machine's monotonic clock over a
datagram socket; the enqueue is timed on the same clock, so the figure holds the commit, the
notification, the claim, the hand-over to a thread and nothing of the benchmark itself.
``load_per_s`` keeps a steady stream of no-op jobs going on another queue of the same daemon while
the pings are timed (a fraction of what that daemon drains flat out).
"""

from __future__ import annotations

import threading
import time

from daemon import Daemon, drop_schema, fresh_schema
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many


def daemon_pickup(dsn: str, samples: int, *, schema: str | None = None, load_per_s: float = 0.0,
                  load_queue: str = "bench=2x128", queues: tuple[str, ...] = ("idle=1x4",),
                  warmup: int = 5) -> list[float]:
    """Milliseconds from enqueue to body start for ``samples`` pings, one at a time, after
    ``warmup`` pings that are not counted (a fresh process prepares its statements)."""
    import noop_app
    own = schema is None
    schema = schema or fresh_schema(dsn)
    with noop_app.pings() as sock:
        driver = PostgresDriver(dsn, schema=schema)
        stop = threading.Event()
        feeder = threading.Thread(target=_feed, args=(dsn, schema, load_per_s, stop), daemon=True)
        try:
            load = [load_queue] if load_per_s else []
            with Daemon(dsn, schema, [*queues, *load]) as daemon:
                daemon.wait_ready()
                if load_per_s:
                    feeder.start()
                    time.sleep(1.0)
                latencies = []
                base = int(time.time() * 1000)
                for n in range(warmup + samples):
                    sent = time.monotonic()
                    enqueue_many(noop_app.ping, [base + n], driver=driver)
                    began = noop_app.started(sock, base + n)
                    if n >= warmup:
                        latencies.append((began - sent) * 1000.0)
                    time.sleep(0.02)   # the queue is idle again before the next one
        finally:
            stop.set()
            if feeder.is_alive():
                feeder.join()
            driver.close()
            if own:
                drop_schema(dsn, schema)
    return latencies


def _feed(dsn: str, schema: str, per_s: float, stop: threading.Event) -> None:
    """Enqueue no-op jobs at ``per_s`` a second, in batches every 20 ms."""
    import noop_app
    driver = PostgresDriver(dsn, schema=schema)
    batch = max(1, round(per_s / 50))
    n = 10_000_000
    try:
        next_at = time.monotonic()
        while not stop.is_set():
            enqueue_many(noop_app.noop, list(range(n, n + batch)), driver=driver)
            n += batch
            next_at += 0.02
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        driver.close()
