"""Two latencies the suite checks for correctness only, measured here: how soon an idle daemon
starts a job staged through the outbox, and how soon ``/readyz`` answers while slow clients
hold the metrics port.

Outbox: one job staged and committed at a time on an idle ``xjobsd --queue idle=1x4`` (its
relay and its worker both wait on notifications; the poll stays at its default), timed from
the commit to the body's first line on the machine's monotonic clock (``noop_app.ping``
reports its start over a datagram socket). Against the raw loop: the same commit of one row
and a ``NOTIFY`` in one transaction, and one session that ``LISTEN``s, wakes on the
notification and claims the row with ``for update skip locked``: the least a
notification-driven queue can take.

Probes: ``/readyz`` on a fresh connection, as a kubelet sends it, to the supervisor's
``MetricsEndpoint`` in this process: idle, then while ``--slow`` clients each hold a
half-sent request open. The idle probe is the reference.

    python bench/latency.py [--dsn URL] [--samples 40] [--slow 50]
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import time
from contextlib import ExitStack
from typing import Any

import psycopg

from daemon import Daemon, drop_schema, fresh_schema, percentile, raw_listener
from xjobs.drivers.postgres import PostgresDriver
from xjobs.outbox import stage
from xjobs.supervisor.metrics import MetricsEndpoint, MetricsSnapshot

HALF = b"GET /metr"   # no end of line: the server waits for the rest until its request timeout


def outbox_to_start(dsn: str, samples: int, warmup: int = 5) -> list[float]:
    """Milliseconds from a staging transaction's commit to its job's first line, through xjobsd."""
    import noop_app
    schema = fresh_schema(dsn)
    with noop_app.pings() as sock:
        driver = PostgresDriver(dsn, schema=schema)
        try:
            with Daemon(dsn, schema, ["idle=1x4"]) as daemon, psycopg.connect(dsn, autocommit=True) as conn:
                daemon.wait_ready()
                latencies = []
                for n in range(warmup + samples):
                    with conn.transaction():
                        stage(conn, noop_app.ping, n, driver=driver)
                    committed = time.monotonic()
                    began = noop_app.started(sock, n)
                    if n >= warmup:
                        latencies.append((began - committed) * 1000.0)
                    time.sleep(0.02)   # both roles are idle again before the next one
        finally:
            driver.close()
            drop_schema(dsn, schema)
    return latencies


def raw_notify_to_claim(dsn: str, samples: int, warmup: int = 5) -> list[float]:
    """Milliseconds from the commit of a row and its NOTIFY to a listening session's claim of it."""
    claims: queue.Queue[float] = queue.Queue()

    def claim(conn: psycopg.Connection[Any], schema: str) -> None:
        while conn.execute(f"update {schema}.q set state = 'running' where id = (select id from {schema}.q "
                           "where state = 'ready' order by id limit 1 for update skip locked) "
                           "returning id").fetchone() is not None:
            claims.put(time.monotonic())
    with raw_listener(dsn, "raw_latency", "id bigint primary key, state text not null default 'ready'",
                      claim) as schema:
        latencies = []
        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in range(warmup + samples):
                with conn.transaction():
                    conn.execute(f"insert into {schema}.q (id) values (%s)", (n,))
                    conn.execute(f"notify {schema}")
                committed = time.monotonic()
                claimed = claims.get(timeout=10)
                if n >= warmup:
                    latencies.append((claimed - committed) * 1000.0)
                time.sleep(0.02)
    return latencies


def probe_ms(endpoint: MetricsEndpoint) -> float:
    port = endpoint.server.server_address[1]
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /readyz HTTP/1.0\r\nHost: probe\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    took = (time.perf_counter() - started) * 1000.0
    if not answer.startswith(b"HTTP/1.0 200"):
        raise RuntimeError(f"/readyz answered {answer[:40]!r}")
    return took


def readyz(samples: int, slow: int) -> tuple[list[float], list[float]]:
    """Probe times (ms) on an idle endpoint, then beside ``slow`` half-sent requests."""
    endpoint = MetricsEndpoint("127.0.0.1:0", request_timeout_s=600.0)
    endpoint.publish(MetricsSnapshot(alive_at=0.0, not_ready=None))
    endpoint.start()
    address = ("127.0.0.1", endpoint.server.server_address[1])
    try:
        idle = [probe_ms(endpoint) for _ in range(samples)]
        with ExitStack() as stack:
            for _ in range(slow):
                stack.enter_context(socket.create_connection(address)).sendall(HALF)
            end = time.monotonic() + 10
            while (held_open := endpoint.open_connections()) < slow:   # every slow client accepted
                if time.monotonic() > end:
                    raise RuntimeError(f"only {held_open} of {slow} slow clients were accepted")
                time.sleep(0.01)
            held = [probe_ms(endpoint) for _ in range(samples)]
    finally:
        endpoint.stop()
    return idle, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_DATABASE_URL",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--slow", type=int, default=50)
    args = parser.parse_args()

    raw = raw_notify_to_claim(args.dsn, args.samples)
    outbox = outbox_to_start(args.dsn, args.samples)
    print(f"{'commit to start (ms)':<44} {'p50':>8} {'p99':>8} {'max':>8} {'vs raw':>7}")
    for name, samples in (("raw: insert + NOTIFY, LISTEN + skip locked", raw),
                          ("xjobsd: outbox stage to body start", outbox)):
        print(f"{name:<44} {percentile(samples, 0.5):>8.2f} {percentile(samples, 0.99):>8.2f} "
              f"{max(samples):>8.2f} {percentile(samples, 0.5) / percentile(raw, 0.5):>7.1f}")

    idle, held = readyz(args.samples, args.slow)
    print(f"\n{'/readyz on a fresh connection (ms)':<44} {'p50':>8} {'p99':>8} {'max':>8} {'vs idle':>7}")
    for name, samples in (("idle", idle), (f"beside {args.slow} half-sent requests", held)):
        print(f"{name:<44} {percentile(samples, 0.5):>8.2f} {percentile(samples, 0.99):>8.2f} "
              f"{max(samples):>8.2f} {percentile(samples, 0.5) / percentile(idle, 0.5):>7.1f}")


if __name__ == "__main__":
    main()
