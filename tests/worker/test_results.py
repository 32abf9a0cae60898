"""A body's return value through a real worker, on both drivers: encoded once and stored with
the completion (the batched ack, or ``ctx.set_result`` inside ``ctx.transaction()``), None
stored as no result, and a value JSON cannot carry or over ``max_result_bytes`` failing the
run terminally with its code, which ``xjobs.result`` then raises as the dead job's error."""

from __future__ import annotations

import logging

import pytest

import xjobs
from xjobs import config, testing
from xjobs.enqueue import enqueue_many
from xjobs.errors import JobFailed, ResultInvalid


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def declare(registry, fn, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    options.setdefault("tenant", "none")
    return xjobs.job(registry=registry, **options)(fn)


def test_what_a_body_returns_is_its_jobs_result(driver, registry):
    totals = declare(registry, lambda ctx, i: {"n": i["n"], "squares": [k * k for k in range(i["n"])]}, name="totals")
    async def fetch(ctx, i):
        return f"page {i['n']}"
    fetched = declare(registry, fetch, name="fetch")
    nothing = declare(registry, lambda ctx, i: None, name="nothing")
    [a, b] = enqueue_many(totals, [{"n": 3}, {"n": 0}], driver=driver)
    [c] = enqueue_many(fetched, [{"n": 7}], driver=driver)
    [d] = enqueue_many(nothing, [{"n": 1}], driver=driver)
    assert testing.run_until_idle(driver=driver, registry=registry).completed == 4
    assert a.result(driver=driver) == {"n": 3, "squares": [0, 1, 4]}
    assert xjobs.result(b.id, 0, driver=driver) == {"n": 0, "squares": []}
    assert xjobs.result(c.id, driver=driver) == "page 7"
    assert d.result(driver=driver) is None and driver.job_get(d.id).result is None
    assert driver.job_get(a.id).result == {"n": 3, "squares": [0, 1, 4]}


@pytest.mark.parametrize("returned, code", [
    ({"x": float("nan")}, "X_RESULT_INVALID"), ({1: "key"}, "X_RESULT_INVALID"), (object(), "X_RESULT_INVALID"),
    ("x" * 200, "X_RESULT_TOO_LARGE"),
], ids=["nan", "int-key", "object", "too-large"])
def test_a_result_that_cannot_be_stored_fails_the_run_terminally(driver, registry, returned, code, monkeypatch):
    body = declare(registry, lambda ctx, i: returned, name="bad", retry=xjobs.Retry(attempts=5))
    [job] = enqueue_many(body, [{"n": 1}], driver=driver)
    monkeypatch.setattr(config, "_settings", config.Settings(max_result_bytes=100))
    summary = testing.run_until_idle(driver=driver, registry=registry)
    assert summary.jobs == {"bad": {"dead": 1}}                        # never retried
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.result) == ("dead", 1, None)
    assert code in (view.last_error or "")
    with pytest.raises(JobFailed) as err:
        job.result(driver=driver)
    assert err.value.code == "X_JOB_FAILED" and code in (err.value.last_error or "")


@pytest.mark.parametrize("bad", [-1, 10, True, 1.5, float("nan"), "64KiB"])
def test_the_limit_is_a_setting_and_a_bad_one_is_refused(bad):
    assert config.Settings().max_result_bytes == 64 * 1024
    assert config.Settings(max_result_bytes=1 << 20).max_result_bytes == 1 << 20
    with pytest.raises(xjobs.XJobsError) as err:
        config.Settings(max_result_bytes=bad)
    assert err.value.code == "X_INVALID_OPTION" and "max_result_bytes" in str(err.value)


def test_a_job_completed_in_its_transaction_keeps_what_set_result_gave_inside(driver, registry, caplog):
    refused = []
    def charge(ctx, i):
        try:
            ctx.set_result({"bad": float("inf")})
        except ResultInvalid as exc:
            refused.append(exc.code)
        with ctx.transaction():
            ctx.set_result({"charged": i["n"]})
        return "too late"           # the job completed with the block: this is not stored
    def plain(ctx, i):
        with ctx.transaction():
            pass
    charged = declare(registry, charge, name="charge")
    quiet = declare(registry, plain, name="plain")
    [job] = enqueue_many(charged, [{"n": 5}], driver=driver)
    [other] = enqueue_many(quiet, [{"n": 6}], driver=driver)
    with caplog.at_level(logging.WARNING, logger="xjobs.worker"):
        assert testing.run_until_idle(driver=driver, registry=registry).completed == 2
    assert refused == ["X_RESULT_INVALID"]
    assert job.result(driver=driver) == {"charged": 5}
    assert other.result(driver=driver) is None
    assert any("ctx.set_result()" in r.getMessage() for r in caplog.records)


def test_a_job_of_steps_stores_what_its_last_attempt_returned(driver, registry, clock):
    def body(ctx, i):
        fetched = ctx.step.run("fetch", lambda: {"rows": i["n"]})
        ctx.step.sleep("cool off", 1000)        # suspends the job; the run after the sleep replays
        return {"rows": fetched["rows"], "attempt": ctx.attempt}
    stepped = declare(registry, body, name="stepped")
    [job] = enqueue_many(stepped, [{"n": 3}], driver=driver)
    assert testing.run_until_idle(driver=driver, registry=registry, with_scheduled=True).jobs == \
        {"stepped": {"suspended": 1, "completed": 1}}
    assert job.result(0, driver=driver) == {"rows": 3, "attempt": 1}   # a sleep spends no attempt
