"""``xjobsd tick`` ages the aging queues' waiting jobs before its pass claims, so a job that
waited long enough runs ahead of younger, better-priority ones. Both drivers, in this process."""

from __future__ import annotations

import itertools

import xjobs
from xjobs.config import Settings
from xjobs.enqueue import enqueue_many
from xjobs.tick import run_tick

STEP_MS = 1_000.0


def test_a_tick_ages_first_and_claims_in_the_aged_order(driver, clock):
    registry = xjobs.Registry()
    started: list[int] = []
    handle = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry,
                       name="work", aging=STEP_MS)(lambda ctx, i: started.append(i["n"]))
    enqueue_many(handle, [{"n": 9}], priority=9, driver=driver)
    clock.advance(STEP_MS / 2)
    enqueue_many(handle, [{"n": n} for n in range(3)], priority=0, driver=driver)
    clock.advance(9 * STEP_MS)                          # the first waited nine steps: level with the rest
    ticks = itertools.count()
    summary = run_tick(driver=driver, registry=registry, settings=Settings(), concurrency=1,
                       clock=lambda: next(ticks) * 100.0)
    assert summary.upkeep["aged"] == 1
    assert started == [9, 0, 1, 2], summary.as_json()  # it is as urgent as they are now, and older
