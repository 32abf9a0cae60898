"""An ``Arbiter`` in this process over the fake roles of ``fake_roles.py``: the shortened
timings, a probe that records what it was asked to release, and the hand-driven ``step()``
loop the supervisor tests wait with (a condition and a deadline, never a sleep)."""

from __future__ import annotations

import time

from tests.supervisor.fake_roles import maker
from xjobs.config import Settings
from xjobs.supervisor.arbiter import Arbiter, ArbiterOptions
from xjobs.supervisor.backoff import Backoff
from xjobs.supervisor.slots import RoleSpec
from xjobs.workers.queue_worker import QueueWorker

FAST = ArbiterOptions(heartbeat_ms=100, silence_s=1.0, startup_s=5.0, kill_grace_s=0.3,
                      release_flush_s=0.1, backoff=Backoff(base_s=0.05, cap_s=0.2, stable_s=5.0))
# a short lease: a silent child is killed after max(silence, lease + heartbeat) = 1.1 s
SETTINGS = Settings(drain_deadline_ms=2000, lease_ms=1000, heartbeat_ms=200)


class RecordingProbe:
    reachable = True
    pending_releases = 0

    def __init__(self) -> None:
        self.released: list[tuple[str, str | None]] = []
        self.counted: dict[str, bool] = {}   # identity -> whether it crashed (its jobs may be charged)

    def start(self) -> None: ...
    def stop(self, timeout_s: float = 0) -> None: ...
    def flush_releases(self, timeout_s: float) -> None: ...
    def results(self) -> list: return []

    def request_release(self, identity: str, queue: str | None, within_s: float, *,
                        crashed: bool = True, how: str = "died", charge: str = "alone") -> None:
        self.released.append((identity, queue))
        self.counted[identity] = crashed


def spec(queue: str = "q", processes: int = 1, *behavior: str, concurrency: int = 4) -> RoleSpec:
    return RoleSpec("worker", queue, processes, concurrency, maker(queue, *behavior), QueueWorker.policy)


def drive(arbiter: Arbiter, condition, timeout: float = 5.0, what: str = "the condition"):
    end = time.monotonic() + timeout
    while True:
        arbiter.step(timeout=0.02)
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}; status: {arbiter.cmd_status({})}")


def rows(arbiter: Arbiter, queue: str | None = None) -> list[dict]:
    return [c for c in arbiter.cmd_status({})["children"] if queue is None or c["queue"] == queue]


def all_ready(arbiter: Arbiter) -> bool:
    kids = rows(arbiter)
    return bool(kids) and all(c["state"] == "ready" for c in kids)


