"""A purge of three stores for the daemon tests: each records its call (with the pass's
``now``) in the effects table, and the second blocks on the job's first attempt, so the test
can SIGKILL the worker while that target runs."""

from __future__ import annotations

import time

import xjobs
from xjobs import DEFAULT_PURGE_CRON, purge, task

from .daemon_app import record


class Store:
    def __init__(self, name: str, blocks: bool = False) -> None:
        self.name = name
        self.blocks = blocks

    def purge_expired(self, now_ms: int) -> int:
        ctx = xjobs.current()
        assert ctx is not None
        record(ctx, f"{self.name}:{now_ms}")
        if self.blocks and ctx.attempt == 1:
            time.sleep(120)     # killed here by the test
        return len(self.name) + 1


sweep = purge(name="sweep", queue="purge", targets=lambda: [Store("a"), Store("bb", blocks=True), Store("ccc")])
task(name="sweep_hourly", cron=DEFAULT_PURGE_CRON, tz="UTC", job=sweep)

