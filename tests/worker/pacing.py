"""Drive a worker by hand: ``run_once(now)`` with an injected ``now``, waiting on the worker's
own wake-up fds (never on sleeps) until a condition holds or a timeout passes; the shorthands
the worker tests declare and enqueue their jobs with; and a scheduler on a clock that stands
still (each test passes ``now`` to its passes)."""

from __future__ import annotations

import time
from typing import Any, Callable

import xjobs
from xjobs.config import Settings
from xjobs.enqueue import enqueue_many
from xjobs.workers.queue_worker import QueueWorker
from xjobs.workers.scheduler import Scheduler
from xjobs.workers.drive import drive

HOUR = 3_600_000.0


class Pacer:
    """A worker plus a hand-stepped loop clock (ms) for its timers."""

    def __init__(self, worker: QueueWorker, start_ms: float = 0.0) -> None:
        self.worker = worker
        self.now = start_ms
        worker.clock = lambda: self.now   # the lease watch reads the same hand-stepped clock
        worker.initialize()

    def pass_(self, advance_ms: float = 0.0) -> float:
        self.now += advance_ms
        return self.worker.run_once(self.now)

    def until(self, condition: Callable[[], object], timeout_s: float = 10.0, advance_ms: float = 0.0) -> None:
        """Run passes (``drive``), blocking on the worker's wake-up fds between them, until
        ``condition()``; the hand clock moves ``advance_ms`` before every pass."""
        deadline = time.monotonic() + timeout_s

        def reached() -> bool:
            if condition():
                return True
            if time.monotonic() >= deadline:
                raise AssertionError(f"condition not reached in {timeout_s}s; stats={self.worker.stats()}")
            self.now += advance_ms    # the next pass's now
            return False
        self.now += advance_ms
        drive(self.worker, until=reached, clock=lambda: self.now, most_wait_ms=50.0)

    def totals(self) -> dict:
        return self.worker.stats().to_wire()


def make_worker(driver, registry, queue: str = "q", concurrency: int = 4, **settings) -> QueueWorker:
    defaults: dict[str, Any] = {"poll_ms": 50.0, "heartbeat_ms": 1000.0, "lease_ms": 5000.0, "rescue_ms": 60_000.0}
    defaults.update(settings)
    return QueueWorker(driver=driver, registry=registry, queue=queue, concurrency=concurrency,
                       settings=Settings(**defaults), identity=f"test-worker-{id(registry)}")


def declare(registry, fn=None, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    options.setdefault("tenant", "none")
    return xjobs.job(registry=registry, **options)(fn) if fn else (lambda f: xjobs.job(registry=registry, **options)(f))


def enqueue(handle, driver, *inputs):
    return [e.id for e in enqueue_many(handle, list(inputs), driver=driver)]


def scheduler(driver, registry, holder: str, **settings) -> Scheduler:
    settings.setdefault("leader_lease_ms", 10_000)
    role = Scheduler(driver=driver, registry=registry, settings=Settings(**settings), identity=f"{holder}-child",
                     holder=holder, clock=lambda: 0.0)
    role.initialize()
    return role
