"""``ctx.progress``: never blocks the body, lands at most once a second per run, fenced on the
lease; refused once the run was told to stop; shown by ``status`` and ``jobs show``."""

from __future__ import annotations

import math
import threading

import pytest

import xjobs
from xjobs.errors import Aborted, InvalidOption

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def test_progress_is_written_on_the_next_round_and_reported(driver, registry):
    reported, release = threading.Event(), threading.Event()
    refusals: list[str] = []

    def body(ctx, i):
        for bad in (math.nan, -1):
            try:
                ctx.progress(bad)
            except InvalidOption as exc:
                refusals.append(exc.code)
        ctx.progress(3, 10, "page 3")
        ctx.progress(4, 10, "page 4")          # only the latest is kept
        reported.set()
        release.wait(10)
    handle = declare(registry, body, name="pages")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(reported.is_set)
    pacer.until(lambda: driver.job_get(job_id).progress is not None, advance_ms=1000)
    written = driver.job_get(job_id).progress
    assert (written["done"], written["total"], written["note"]) == (4, 10, "page 4")
    assert refusals == ["X_INVALID_OPTION", "X_INVALID_OPTION"]
    [running] = worker.stats().running
    assert (running["id"], running["progress"]["done"], running["alone"]) == (job_id, 4, False)
    release.set()
    pacer.until(lambda: pacer.totals()["completed"] == 1)


def test_progress_is_refused_once_the_run_was_told_to_stop(driver, registry):
    seen: list[str] = []
    started = threading.Event()

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
        try:
            ctx.progress(1)
        except Aborted as exc:
            seen.append(exc.code)
    handle = declare(registry, body, name="late")
    enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    worker.stop_accepting("test")
    pacer.until(lambda: seen == ["X_ABORTED"])
