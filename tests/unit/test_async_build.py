"""An awaited enqueue builds its jobs on the event loop's own thread, ``BUILD_ON_LOOP`` at a
time, and gives the loop's other tasks a turn between two slices: a worker thread would hold
the GIL through the build, and the loop would wait for it up to the interpreter's switch
interval each time (``bench/async_lag.py`` measures the lag)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import xjobs
from xjobs.enqueue import BUILD_ON_LOOP, abuild_jobs
from xjobs.errors import PayloadTooLarge


def _handle(threads: set[int]) -> xjobs.JobHandle:
    def key(i: dict) -> str:
        threads.add(threading.get_ident())     # where each job is built
        return str(i["n"])
    return xjobs.job(queue="q", idempotency_key=key, tenant="none", registry=xjobs.Registry(),
                     name="built")(lambda ctx, i: None)


def test_a_large_build_runs_on_the_loops_thread_and_lets_other_tasks_run_between_slices():
    threads: set[int] = set()
    handle = _handle(threads)
    count = BUILD_ON_LOOP * 10

    async def go() -> tuple[int, int, list[str]]:
        turns = 0
        stop = asyncio.Event()

        async def other_task() -> None:
            nonlocal turns
            while not stop.is_set():
                turns += 1
                await asyncio.sleep(0)
        beside = asyncio.create_task(other_task())
        await asyncio.sleep(0)          # it has started
        before = turns
        jobs = await abuild_jobs(handle, [{"n": n} for n in range(count)], delay=None, run_at=None,
                                 priority=None, enqueued_by=None)
        during = turns - before
        stop.set()
        await beside
        return threading.get_ident(), during, [job.idempotency_key for job in jobs]
    loop_thread, during, keys = asyncio.run(go())
    assert threads == {loop_thread}
    assert during >= count // BUILD_ON_LOOP - 1     # a turn between every two slices
    assert keys == [str(n) for n in range(count)]   # in order, every one


def test_a_refusal_in_a_late_slice_answers_no_job_at_all():
    handle = _handle(set())
    inputs = [{"n": n} for n in range(BUILD_ON_LOOP * 3)] + [{"n": -1, "blob": "x" * 2_000_000}]
    with pytest.raises(PayloadTooLarge):
        asyncio.run(abuild_jobs(handle, inputs, delay=None, run_at=None, priority=None, enqueued_by=None))
