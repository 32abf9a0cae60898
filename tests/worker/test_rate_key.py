"""Rate limits by key through the worker, on both drivers: ``job(rate="N/period", rate_key=...)``
starts at most N runs per key in each window of the driver's clock, leaves the rest ready with
no attempt spent and does not claim them again before the window opens; what is refused at
declaration and at enqueue; the manifest and ``jobs show``."""

from __future__ import annotations

import logging
import math

import pytest

import xjobs
from xjobs import admin
from xjobs.drivers.base import ListFilter
from xjobs.drivers.memory import MemoryDriver
from xjobs.errors import InvalidOption
from xjobs.manifest import describe
from xjobs.config import Settings
from xjobs.rate_keys import rate_waiting
from xjobs.workers.upkeep import RATE_KEY_RETENTION_MS, Upkeep

from .pacing import Pacer, declare, enqueue, make_worker

SECOND = 1_000.0


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def waiting(driver, job_id: int) -> dict:
    found = rate_waiting(driver, job_id)
    assert found is not None
    return found


def completed(driver, ids) -> list[int]:
    return [i for i in ids if driver.job_get(i).state == "completed"]


def test_each_key_starts_its_rate_per_window_and_the_rest_wait_ready_without_an_attempt(driver, clock, registry):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="2/1s", rate_key=lambda i: i["key"])
    a = enqueue(calls, driver, *({"n": n, "key": "a"} for n in range(5)))
    b = enqueue(calls, driver, {"n": 10, "key": "b"})
    pacer = Pacer(make_worker(driver, registry, concurrency=8, poll_ms=20))
    pacer.until(lambda: len(completed(driver, a + b)) == 3, advance_ms=25)
    assert completed(driver, a) == a[:2] and completed(driver, b) == b
    claimed = pacer.totals()["claimed"]
    for _ in range(5):    # the window is full: no pass claims a job of "a" again
        pacer.pass_(advance_ms=25)
    assert pacer.totals()["claimed"] == claimed
    for job_id in a[2:]:
        view = driver.job_get(job_id)
        assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    waiting = rate_waiting(driver, a[2])
    assert waiting is not None and (waiting["key"], waiting["cap"], waiting["started"]) == ("a", 2, 2)
    assert waiting["waiting_until"] == pytest.approx(clock.now_ms() + SECOND)
    for expected in (4, 5):
        clock.advance(SECOND)
        pacer.until(lambda: len(completed(driver, a)) == expected, advance_ms=25)
    assert [driver.job_get(i).attempt for i in a + b] == [1] * 6
    assert pacer.totals()["retried"] == pacer.totals()["dead"] == 0
    pacer.worker.close()


def test_a_batch_over_the_window_sheds_its_overflow_to_the_opening(driver, clock, registry):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="3/1s")   # one key: the job's
    ids = enqueue(calls, driver, *({"n": n} for n in range(5)))
    worker = make_worker(driver, registry, concurrency=8, poll_ms=20)
    pacer = Pacer(worker)
    pacer.until(lambda: len(completed(driver, ids)) == 3, advance_ms=25)
    shed = [driver.job_get(i) for i in ids[3:]]
    assert {(v.state, v.attempt, v.last_error) for v in shed} == {("ready", 0, None)}
    # the overflow of the claimed batch waits for the next window's opening, not in a spin
    opening = (math.floor(clock.now_ms() / SECOND) + 1) * SECOND
    assert {round(v.run_at) for v in shed} == {opening}
    assert worker.stats().shed == 2
    assert waiting(driver, ids[3])["key"] == "calls"
    clock.advance(SECOND)
    pacer.until(lambda: len(completed(driver, ids)) == 5, advance_ms=25)
    worker.close()


def test_a_job_without_a_rate_is_not_held_back_by_a_full_key(driver, clock, registry):
    rated = declare(registry, lambda ctx, i: None, name="rated", rate="1/1m", rate_key=lambda i: i["key"])
    free = declare(registry, lambda ctx, i: None, name="free")
    held = enqueue(rated, driver, *({"n": n, "key": "k"} for n in range(3)))
    loose = enqueue(free, driver, *({"n": n} for n in range(3)))
    pacer = Pacer(make_worker(driver, registry, concurrency=4, poll_ms=20))
    pacer.until(lambda: len(completed(driver, loose)) == 3 and len(completed(driver, held)) == 1, advance_ms=25)
    assert len(completed(driver, held)) == 1
    pacer.worker.close()


@pytest.mark.parametrize("rate", ["abc", "0/1s", "-1/1s", "nan/1s", "inf/1s", "1.5/1s", "1/0s", "1/-1s",
                                  "1/nan", "1/0.1ms", "2000000/1s", "1/32d", "10", "10/", "/1s", "\u00b2/1s", "1e3/1s", 10,
                                  float("nan"), ("10", "1s")])
def test_a_bad_rate_is_refused_at_declaration(registry, rate):
    with pytest.raises(InvalidOption) as caught:
        declare(registry, lambda ctx, i: None, name="bad", rate=rate)
    assert caught.value.code == "X_INVALID_OPTION" and caught.value.option == "rate"
    assert registry.jobs() == []


@pytest.mark.parametrize("rate, cap, period_ms", [("50/1s", 50, 1000.0), ("100/1m", 100, 60_000.0),
                                                  ("10/250ms", 10, 250.0), ("5/s", 5, 1000.0),
                                                  (" 7 / 2h ", 7, 7_200_000.0), ("1/31d", 1, 31 * 86_400_000.0)])
def test_a_rate_is_n_per_period(registry, rate, cap, period_ms):
    handle = declare(registry, lambda ctx, i: None, name="ok", rate=rate)
    assert (handle.rate.cap, handle.rate.period_ms) == (cap, period_ms)


def test_rate_key_needs_a_rate_and_must_be_callable(registry):
    with pytest.raises(InvalidOption) as caught:
        declare(registry, lambda ctx, i: None, name="bad", rate_key=lambda i: i["k"])
    assert caught.value.option == "rate_key"
    with pytest.raises(InvalidOption) as caught:
        declare(registry, lambda ctx, i: None, name="bad", rate="1/1s", rate_key="api_key")
    assert caught.value.option == "rate_key"


@pytest.mark.parametrize("key", [None, "", True, {"k": 1}, 1.5, "x" * 1025, "a\x00b"])
def test_a_bad_key_is_refused_at_enqueue_and_nothing_of_the_call_is_written(driver, registry, key):
    keys = {1: "fine", 2: key}    # from the function, not the payload: the payload's own checks pass
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="1/1s", rate_key=lambda i: keys[i["n"]])
    with pytest.raises(xjobs.XJobsError) as caught:
        enqueue(calls, driver, {"n": 1}, {"n": 2})
    assert caught.value.code == "X_JOB_RATE_KEY_INVALID"
    assert driver.job_list(ListFilter()) == []


def test_a_key_function_that_raises_is_refused_and_an_integer_key_is_its_digits(driver, registry):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="1/1s", rate_key=lambda i: i["account"])
    with pytest.raises(xjobs.XJobsError) as caught:
        enqueue(calls, driver, {"n": 1})
    assert caught.value.code == "X_JOB_RATE_KEY_INVALID" and "KeyError" in str(caught.value)
    [job_id] = enqueue(calls, driver, {"n": 2, "account": 42})
    assert waiting(driver, job_id)["key"] == "42"


def test_a_driver_without_the_store_refuses_to_start_a_rated_job(registry):
    class NoRates(MemoryDriver):
        def __init__(self) -> None:
            super().__init__()
            self.rate_keys = None
    declare(registry, lambda ctx, i: None, name="calls", rate="1/1s")
    worker = make_worker(NoRates(), registry)
    with pytest.raises(xjobs.XJobsError) as caught:
        worker.initialize()
    assert caught.value.code == "X_JOB_RATE_UNENFORCEABLE"
    worker.close()


def test_the_manifest_and_jobs_show_say_the_rate(driver, clock, registry):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="1/1m", rate_key=lambda i: i["key"])
    declare(registry, lambda ctx, i: None, name="plain")
    jobs = {j["name"]: j for j in describe(registry)["jobs"]}
    assert jobs["calls"]["rate"] == {"cap": 1, "period_ms": 60_000.0, "text": "1/1m", "key": "derived"}
    assert "rate" not in jobs["plain"]
    ids = enqueue(calls, driver, {"n": 1, "key": "k"}, {"n": 2, "key": "k"})
    pacer = Pacer(make_worker(driver, registry, concurrency=2, poll_ms=20))
    pacer.until(lambda: completed(driver, ids) == ids[:1], advance_ms=25)
    shown = admin.job_json(driver, driver.job_get(ids[1]))
    assert shown["rate_key"]["key"] == "k" and shown["rate_key"]["waiting_until"] is not None
    assert "rate_key" not in admin.job_json(driver, driver.job_get(ids[0])) or \
        admin.job_json(driver, driver.job_get(ids[0]))["rate_key"]["key"] == "k"
    pacer.worker.close()


def test_the_upkeep_forgets_a_keys_window_an_hour_after_it_closed(driver, clock, registry):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="5/1s", rate_key=lambda i: i["key"])
    [job_id] = enqueue(calls, driver, {"n": 1, "key": "k"})
    pacer = Pacer(make_worker(driver, registry, poll_ms=20))
    pacer.until(lambda: completed(driver, [job_id]) == [job_id], advance_ms=25)
    upkeep = Upkeep(driver=driver, settings=Settings(), who="test", count=lambda name, n: None)
    upkeep.prune()
    assert waiting(driver, job_id)["cap"] == 5
    clock.advance(RATE_KEY_RETENTION_MS + 2 * SECOND)
    upkeep.prune()
    assert waiting(driver, job_id) == {"key": "k", "cap": None, "period_ms": None, "started": None,
                                       "window_opened": None, "waiting_until": None}
    pacer.worker.close()


def test_a_store_that_fails_sheds_the_rated_jobs_and_says_so(driver, clock, registry, caplog, monkeypatch):
    calls = declare(registry, lambda ctx, i: None, name="calls", rate="5/1s")
    [job_id] = enqueue(calls, driver, {"n": 1})

    def fail(asks):
        raise ConnectionError("the server went away")
    monkeypatch.setattr(driver.rate_keys, "rate_take", fail)   # the door the worker's call reaches
    worker = make_worker(driver, registry, poll_ms=20)
    pacer = Pacer(worker)
    with caplog.at_level(logging.WARNING, logger="xjobs.worker"):
        pacer.pass_()
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "worker.rate.take.failed"]
    assert record.levelno == logging.WARNING and "the server went away" in record.error
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    assert worker.stats().shed == 1
    monkeypatch.undo()                # the store is back: the job runs
    clock.advance(50.0)
    pacer.until(lambda: completed(driver, [job_id]) == [job_id], advance_ms=25)
    worker.close()
