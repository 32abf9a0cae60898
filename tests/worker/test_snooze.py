"""Snooze: a body puts its job back for later, on both drivers, driven pass by pass."""

from __future__ import annotations

import logging
import math
import threading
from datetime import timedelta

import pytest

import xjobs
from xjobs import manifest, testing
from xjobs.errors import InvalidOption
from xjobs.snooze import SnoozeInvalid, SnoozeLimit

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def test_a_snooze_puts_the_job_back_without_an_attempt_or_an_error(driver, registry, clock, caplog):
    caplog.set_level(logging.INFO, logger="xjobs")
    attempts = []

    def body(ctx, i):
        attempts.append(ctx.attempt)
        if len(attempts) == 1:
            raise xjobs.Snooze("5m")
        return "done"
    handle = declare(registry, body, name="later")
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["snoozed"] == 1)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.snoozes, view.last_error) == ("ready", 0, 1, None)
    assert view.run_at == pytest.approx(clock.now_ms() + 300_000, abs=1)
    assert [(h["outcome"], h["attempt"], h["error"]) for h in view.history] == [("snoozed", 1, None)]
    assert pacer.totals()["jobs"] == {"later": {"snoozed": 1}}
    [logged] = [r for r in caplog.records if getattr(r, "event", None) == "job.snoozed"]
    assert (logged.levelname, logged.job_id, logged.delay_s, logged.snoozes) == ("INFO", job_id, 300.0, 1)
    clock.advance(300_000)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.snoozes, view.result) == ("completed", 1, 1, "done")
    assert attempts == [1, 1]     # the snoozed run spent no attempt


def test_an_async_body_returns_ctx_snooze_in_seconds(driver, registry, clock):
    runs = []

    async def body(ctx, i):
        runs.append(ctx.attempt)
        return ctx.snooze(30) if len(runs) < 3 else None
    handle = declare(registry, body, name="async_later")
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["snoozed"] == 1)
    assert driver.job_get(job_id).run_at == pytest.approx(clock.now_ms() + 30_000, abs=1)
    for snoozes in (1, 2):
        clock.advance(30_000)
        pacer.until(lambda: pacer.totals()["snoozed"] + pacer.totals()["completed"] == snoozes + 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.snoozes) == ("completed", 1, 2)
    assert runs == [1, 1, 1]


def test_past_max_snoozes_the_job_is_dead_and_reported_like_any_dead_letter(driver, registry, clock):
    reports, dead = [], threading.Event()

    def hook(ctx, error, verdict):
        reports.append((type(error).__name__, getattr(error, "code", None), verdict.dead))
        dead.set()
    xjobs.on_error(hook, registry=registry)
    handle = declare(registry, lambda ctx, i: ctx.snooze(timedelta(seconds=1)), name="sleepy", max_snoozes=2)
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    for n in (1, 2):
        pacer.until(lambda: pacer.totals()["snoozed"] == n, advance_ms=100)
        clock.advance(1_000)
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.snoozes) == ("dead", 1, 2)
    assert view.last_error.startswith("X_SNOOZE_LIMIT: job 'sleepy' snoozed 2 times, its max_snoozes=2")
    assert [h["outcome"] for h in view.history] == ["snoozed", "snoozed", "dead"]
    assert dead.wait(5)
    assert reports == [("SnoozeLimit", "X_SNOOZE_LIMIT", True)]
    assert issubclass(SnoozeLimit, xjobs.Terminal)
    # an operator's retry gives it a fresh budget of snoozes
    assert driver.job_requeue(job_id).snoozes == 0


def test_max_snoozes_zero_dead_letters_the_first_snooze(driver, registry):
    handle = declare(registry, lambda ctx, i: ctx.snooze("1s"), name="never", max_snoozes=0)
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1)
    assert "X_SNOOZE_LIMIT" in driver.job_get(job_id).last_error


def test_a_snooze_in_a_steps_job_keeps_its_completed_steps(driver, registry, clock):
    calls = []

    def fetch():
        calls.append("fetch")
        return 41

    def body(ctx, i):
        first = ctx.step.run("fetch", fetch)
        if "snoozed" not in calls:     # the first run snoozes after its first step
            calls.append("snoozed")
            raise xjobs.Snooze("10s")

        def finish():
            calls.append("finish")
            return first + 1
        return ctx.step.run("finish", finish)
    handle = declare(registry, body, name="stepped")
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["snoozed"] == 1)
    assert [s.name for s in driver.job_get(job_id).steps] == ["fetch"]
    clock.advance(10_000)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.result) == ("completed", 1, 42)
    assert calls == ["fetch", "snoozed", "finish"]      # fetch ran once: the snooze reopened nothing


def test_a_snooze_while_draining_still_waits_its_time(memory_driver, registry, clock):
    started, go = threading.Event(), threading.Event()

    def body(ctx, i):
        started.set()
        assert go.wait(10)
        raise xjobs.Snooze("1m")
    handle = declare(registry, body, name="drained")
    [job_id] = enqueue(handle, memory_driver, {"n": 1})
    worker = make_worker(memory_driver, registry)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    worker.stop_accepting("SIGTERM")
    go.set()
    pacer.until(lambda: pacer.totals()["snoozed"] == 1)
    view = memory_driver.job_get(job_id)
    assert (view.state, view.run_at) == ("ready", pytest.approx(clock.now_ms() + 60_000, abs=1))
    worker.close(None)


@pytest.mark.parametrize("duration", ["soon", "-5s", -1, math.nan, math.inf, True, None, [5], 10 * 366 * 86_400])
def test_a_bad_duration_is_refused_where_the_snooze_is_made(duration):
    with pytest.raises(SnoozeInvalid) as raised:
        xjobs.Snooze(duration)
    assert raised.value.code == "X_SNOOZE_INVALID"


def test_durations_read_like_retry_after():
    assert xjobs.Snooze(5).delay_ms == 5_000          # a number is seconds, as RetryAfter takes it
    assert xjobs.Snooze(0.25).delay_ms == 250
    assert xjobs.Snooze("5m").delay_ms == 300_000
    assert xjobs.Snooze("250ms").delay_ms == 250
    assert xjobs.Snooze(timedelta(hours=1)).delay_ms == 3_600_000
    assert xjobs.Snooze(0).delay_ms == 0


def test_a_bad_snooze_in_a_body_fails_the_attempt_with_its_code(memory_driver, registry):
    handle = declare(registry, lambda ctx, i: ctx.snooze("whenever"), name="bad",
                     retry=xjobs.Retry(attempts=1))
    [job_id] = enqueue(handle, memory_driver, {"n": 1})
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1)
    assert "X_SNOOZE_INVALID" in memory_driver.job_get(job_id).last_error


@pytest.mark.parametrize("value", [-1, 1.5, "3", None, True, 1_000_001])
def test_max_snoozes_is_checked_at_declaration(registry, value):
    with pytest.raises(InvalidOption) as raised:
        declare(registry, lambda ctx, i: None, name="x", max_snoozes=value)
    assert raised.value.code == "X_INVALID_OPTION" and "max_snoozes" in str(raised.value)


def test_the_manifest_shows_max_snoozes(registry):
    declare(registry, lambda ctx, i: None, name="plain")
    declare(registry, lambda ctx, i: None, name="patient", max_snoozes=7)
    jobs = {j["name"]: j for j in manifest.describe(registry)["jobs"]}
    assert (jobs["plain"]["max_snoozes"], jobs["patient"]["max_snoozes"]) == (100, 7)


def test_run_until_idle_steps_the_clock_through_a_snooze(registry):
    def body(ctx, i):
        return ctx.snooze("10m") if xjobs.get(ctx.job_id)["snoozes"] < 2 else "awake"
    handle = declare(registry, body, name="dozing")
    with testing.memory_queue():
        [job] = handle.enqueue_many([{"n": 1}])
        summary = testing.run_until_idle("q", registry=registry, with_scheduled=True)
        assert (summary.snoozed, summary.completed) == (2, 1)
        assert summary.advanced_ms == pytest.approx(1_200_000, abs=1)
        assert job.get()["result"] == "awake" and job.get()["snoozes"] == 2
