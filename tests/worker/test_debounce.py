"""Debounce: an enqueue whose key a not-yet-started job holds moves that job, on both drivers."""

from __future__ import annotations

import asyncio
import threading

import pytest

import xjobs
from xjobs import manifest
from xjobs.enqueue import aenqueue_many, enqueue_many
from xjobs.errors import InvalidOption

from .pacing import Pacer, declare, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def debounced(registry, fn=lambda ctx, i: i["v"], **options):
    options.setdefault("debounce", "10s")
    options.setdefault("debounce_max", "2m")
    return declare(registry, fn, name="search_index", idempotency_key=lambda i: f"doc:{i['doc']}", **options)


def test_each_enqueue_moves_the_waiting_job_and_gives_it_the_newest_input(driver, registry, clock):
    handle = debounced(registry)
    created = clock.now_ms()
    [first] = enqueue_many(handle, [{"doc": 1, "v": 1}], driver=driver)
    assert (first.deduped, first.debounced) == (False, False)
    assert driver.job_get(first.id).run_at == pytest.approx(created + 10_000, abs=1)   # trailing from the start
    clock.advance(4_000)
    [again] = enqueue_many(handle, [{"doc": 1, "v": 2}], driver=driver)
    assert (again.id, again.deduped, again.debounced) == (first.id, True, True)
    view = driver.job_get(first.id)
    assert (view.payload, view.run_at, view.attempt) == ({"doc": 1, "v": 2}, pytest.approx(clock.now_ms() + 10_000, abs=1), 0)
    clock.advance(110_000)     # 114 s after the first enqueue: debounce_max bounds the next move
    [late] = enqueue_many(handle, [{"doc": 1, "v": 3}], driver=driver)
    assert late.debounced and driver.job_get(first.id).run_at == pytest.approx(created + 120_000, abs=1)
    [other] = enqueue_many(handle, [{"doc": 2, "v": 9}], driver=driver)   # another key: a job of its own
    assert other.id != first.id and not other.deduped


def test_one_call_with_one_key_many_times_keeps_the_last_input(driver, registry):
    handle = debounced(registry)
    done = enqueue_many(handle, [{"doc": 7, "v": n} for n in range(5)], driver=driver)
    assert len({e.id for e in done}) == 1
    assert [(e.deduped, e.debounced) for e in done] == [(False, False)] + [(True, True)] * 4
    assert driver.job_get(done[0].id).payload == {"doc": 7, "v": 4}


def test_an_awaited_enqueue_debounces_too(driver, registry):
    handle = debounced(registry)
    [first] = enqueue_many(handle, [{"doc": 1, "v": 1}], driver=driver)
    [again] = asyncio.run(aenqueue_many(handle, [{"doc": 1, "v": 2}], driver=driver))
    assert (again.id, again.debounced) == (first.id, True)
    assert driver.job_get(first.id).payload == {"doc": 1, "v": 2}


def test_a_holder_that_started_answers_as_a_duplicate(driver, registry, clock):
    started, release = threading.Event(), threading.Event()

    def body(ctx, i):
        started.set()
        assert release.wait(10)
        return i["v"]
    handle = debounced(registry, body)
    [first] = enqueue_many(handle, [{"doc": 1, "v": 1}], driver=driver)
    clock.advance(10_000)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(started.is_set)
    [again] = enqueue_many(handle, [{"doc": 1, "v": 2}], driver=driver)
    assert (again.id, again.deduped, again.debounced) == (first.id, True, False)
    release.set()
    pacer.until(lambda: pacer.totals()["completed"] == 1)
    view = driver.job_get(first.id)
    assert (view.payload, view.result) == ({"doc": 1, "v": 1}, 1)   # the running job kept its input


def test_a_burst_runs_once_with_the_last_input(driver, registry, clock):
    seen = []

    def body(ctx, i):
        seen.append(i["v"])
        return i["v"]
    handle = debounced(registry, body, debounce="2s", debounce_max="1m")
    ids = set()
    for n in range(20):
        ids |= {e.id for e in enqueue_many(handle, [{"doc": 1, "v": n}], driver=driver)}
        clock.advance(500)
    pacer = Pacer(make_worker(driver, registry))
    pacer.pass_()
    assert seen == [] and pacer.totals()["claimed"] == 0   # the last enqueue moved it 2 s on
    clock.advance(2_000)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert seen == [19] and len(ids) == 1


def test_a_job_without_debounce_still_dedupes(driver, registry):
    handle = declare(registry, lambda ctx, i: None, name="plain")
    first, second = enqueue_many(handle, [{"n": 1, "v": 1}, {"n": 1, "v": 2}], driver=driver)
    assert (second.id, second.deduped, second.debounced) == (first.id, True, False)
    assert driver.job_get(first.id).payload == {"n": 1, "v": 1}


def test_an_explicit_delay_is_kept_for_the_first_enqueue(memory_driver, registry, clock):
    handle = debounced(registry)
    [first] = enqueue_many(handle, [{"doc": 1, "v": 1}], delay="1m", driver=memory_driver)
    assert memory_driver.job_get(first.id).run_at == pytest.approx(clock.now_ms() + 60_000, abs=1)


@pytest.mark.parametrize("options, option", [
    ({"debounce_max": "2m"}, "debounce_max"),                       # a bound with nothing to bound
    ({"debounce": "10s", "debounce_max": "5s"}, "debounce_max"),    # shorter than the debounce
    ({"debounce": 0}, "debounce"),
    ({"debounce": "soon"}, "debounce"),
    ({"debounce": "10s", "debounce_max": -1}, "debounce_max"),
])
def test_debounce_is_checked_at_declaration(registry, options, option):
    with pytest.raises(InvalidOption) as raised:
        declare(registry, lambda ctx, i: None, name="x", **options)
    assert raised.value.code == "X_INVALID_OPTION" and raised.value.option == option


def test_debounce_without_an_idempotency_key_is_refused(registry):
    with pytest.raises(xjobs.XJobsError) as raised:
        xjobs.job(registry=registry, tenant="none", debounce="10s")(lambda ctx, i: None)
    assert raised.value.code == "X_JOB_IDEMPOTENCY_KEY_REQUIRED"


def test_the_manifest_shows_the_debounce(registry):
    debounced(registry)
    declare(registry, lambda ctx, i: None, name="bounded", debounce="1s")
    jobs = {j["name"]: j for j in manifest.describe(registry)["jobs"]}
    assert (jobs["search_index"]["debounce_ms"], jobs["search_index"]["debounce_max_ms"]) == (10_000, 120_000)
    assert (jobs["bounded"]["debounce_ms"], jobs["bounded"]["debounce_max_ms"]) == (1_000, 10_000)
