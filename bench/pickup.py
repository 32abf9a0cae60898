"""Pickup latency through ``xjobsd``: from ``enqueue()`` called to the body's first line.

The body (``noop_app.ping``) reports its start on the machine's monotonic clock over a
datagram socket; the enqueue is timed on the same clock, so the figure holds the commit, the
notification, the claim, the hand-over to a thread and nothing of the benchmark itself.
``load_per_s`` keeps a steady stream of no-op jobs going on another queue of the same daemon while
the pings are timed (a fraction of what that daemon drains flat out), fed by a process of its
own: a feeding thread in this process would hold the interpreter lock the timed ``enqueue()``
needs (up to its 5 ms switch interval), a delay of the benchmark's, not of xjobs.

With ``stages`` the daemon's children stamp where each ping was on the way (``noop_app.py``
sets that up in the daemon from ``BENCH_PICKUP_STAGES``) and ``Sample.stages`` splits the
latency at those stamps.

    python bench/pickup.py [--samples 200] [--rounds 2] [--stages] [--dsn ...]

runs it alone: idle, then at half of what ``--load-queue`` drains flat out (measured first),
``--rounds`` times in turn, and prints the percentiles of each round and of each stage.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from daemon import Daemon, daemon_drain, drop_schema, fresh_schema, percentile
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many

# the stamps a ping collects on its way, in order; each stage ends at its stamp
STAGES = (
    ("enqueue", "enqueued", "enqueue() called to its return (the commit, and its notification sent)"),
    ("wake", "pass", "the notification to the worker's pass (negative: heard before enqueue() returned)"),
    ("to claim", "claim_sent", "the pass's listener poll and bookkeeping, up to the claim statement"),
    ("claim", "claimed", "the claim statement, to its rows in the worker"),
    ("hand-off", "handed", "a run and its ctx made, handed to the executor"),
    ("thread", "began", "the body's thread wakes and runs its first line"),
)


@dataclass
class Sample:
    ms: float                                     # enqueue() called to the body's first line
    stamps: dict[str, float] = field(default_factory=dict)   # monotonic seconds, by stamp name

    def stages(self) -> dict[str, float]:
        """Milliseconds per stage of ``STAGES``, when every stamp came back."""
        if any(stamp not in self.stamps for _, stamp, _ in STAGES):
            return {}
        out, last = {}, self.stamps["sent"]
        for name, stamp, _ in STAGES:
            out[name] = (self.stamps[stamp] - last) * 1000.0
            last = self.stamps[stamp]
        return out


def daemon_pickup(dsn: str, samples: int, *, schema: str | None = None, load_per_s: float = 0.0,
                  load_queue: str = "bench=2x128", queues: tuple[str, ...] = ("idle=1x4",),
                  warmup: int = 5) -> list[float]:
    """Milliseconds from enqueue to body start for ``samples`` pings, one at a time, after
    ``warmup`` pings that are not counted (a fresh process prepares its statements)."""
    return [s.ms for s in pickup_samples(dsn, samples, schema=schema, load_per_s=load_per_s,
                                         load_queue=load_queue, queues=queues, warmup=warmup)]


def pickup_samples(dsn: str, samples: int, *, schema: str | None = None, load_per_s: float = 0.0,
                   load_queue: str = "bench=2x128", queues: tuple[str, ...] = ("idle=1x4",),
                   warmup: int = 5, stages: bool = False) -> list[Sample]:
    """``daemon_pickup``'s pings as ``Sample``s; ``stages``: with the daemon's stamps."""
    import noop_app
    own = schema is None
    schema = schema or fresh_schema(dsn)
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    feeder = spawn.Process(target=_feed, args=(dsn, schema, load_per_s, stop), daemon=True)
    if stages:
        os.environ["BENCH_PICKUP_STAGES"] = "1"
    with noop_app.pings() as sock:
        driver = PostgresDriver(dsn, schema=schema)
        try:
            load = [load_queue] if load_per_s else []
            with Daemon(dsn, schema, [*queues, *load]) as daemon:
                daemon.wait_ready()
                if load_per_s:
                    feeder.start()
                    time.sleep(1.0)
                out = []
                base = int(time.time() * 1000)
                for n in range(warmup + samples):
                    sent = time.monotonic()
                    enqueue_many(noop_app.ping, [base + n], driver=driver)
                    enqueued = time.monotonic()
                    began, stamps = noop_app.started_with_stamps(sock, base + n)
                    if n >= warmup:
                        out.append(Sample((began - sent) * 1000.0,
                                          {**stamps, "sent": sent, "enqueued": enqueued, "began": began}))
                    time.sleep(0.02)   # the queue is idle again before the next one
        finally:
            os.environ.pop("BENCH_PICKUP_STAGES", None)
            stop.set()
            if feeder.pid is not None:
                feeder.join(30)
            driver.close()
            if own:
                drop_schema(dsn, schema)
    return out


def _feed(dsn: str, schema: str, per_s: float, stop: Any, count: Any = None) -> None:
    """Enqueue no-op jobs at ``per_s`` a second, in batches every 20 ms; with ``count`` (a shared
    ``multiprocessing.Value``), adding each batch to it once it is in."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import noop_app
    driver = PostgresDriver(dsn, schema=schema)
    batch = max(1, round(per_s / 50))
    n = 10_000_000
    try:
        next_at = time.monotonic()
        while not stop.is_set():
            enqueue_many(noop_app.noop, list(range(n, n + batch)), driver=driver)
            n += batch
            if count is not None:
                with count.get_lock():
                    count.value += batch
            next_at += 0.02
            stop.wait(max(0.0, next_at - time.monotonic()))
    finally:
        driver.close()


def _row(title: str, values: list[float]) -> str:
    return (f"{title:<34} {percentile(values, 0.5):>8.2f} {percentile(values, 0.9):>8.2f} "
            f"{percentile(values, 0.99):>8.2f} {max(values):>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load-queue", default="bench=256", help="the shape of the loaded queue")
    parser.add_argument("--load", type=float, default=None,
                        help="jobs/s on the loaded queue (default: half its drain rate, measured first)")
    parser.add_argument("--stages", action="store_true", help="split each ping at the daemon's stamps")
    args = parser.parse_args()
    load = args.load
    if load is None:
        load = daemon_drain(args.dsn, 50_000, [args.load_queue]).rate / 2
    runs: dict[str, list[Sample]] = {}
    print(f"{'pickup (ms)':<34} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    for r in range(args.rounds):
        for title, per_s in (("idle", 0.0), (f"at {load:,.0f} jobs/s on {args.load_queue}", load)):
            got = pickup_samples(args.dsn, args.samples, load_per_s=per_s, load_queue=args.load_queue,
                                 stages=args.stages)
            runs.setdefault(title, []).extend(got)
            print(_row(f"{title}, round {r + 1}", [s.ms for s in got]), flush=True)
    if args.stages:
        for title, got in runs.items():
            split = [s.stages() for s in got if s.stages()]
            print(f"\n{title}: {len(split)} of {len(got)} pings stamped")
            for name, _, what in STAGES:
                print(_row(f"  {name}", [s[name] for s in split]) + f"   {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
