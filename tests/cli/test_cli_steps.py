"""``xjobsd jobs show`` lists a job's steps and what it waits for; ``jobs retry --from-step``
re-opens a step and every later one."""

from __future__ import annotations

import orjson
import pytest

from tests.cli.commands import as_json
from xjobs.drivers.base import Claim, Lease, NewJob, StepResult, StepSleep, StepWait
from xjobs.drivers.postgres import PostgresDriver

pytestmark = pytest.mark.postgres


def _claimed(driver: PostgresDriver, key: str):
    driver.job_enqueue([NewJob(name="flow", queue="q", payload=b"{}", idempotency_key=key)])
    [job] = driver.job_claim(Claim(["q"], 1, 30_000, "w1"))
    return job


def _put(driver, job, *names):
    for name in names:
        assert driver.step_put(job_lease(job), StepResult(name, orjson.dumps({"n": name}), job.attempt, 3.0))


def job_lease(job):
    return Lease(job.id, job.token)


def test_show_lists_steps_and_the_wait(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    try:
        sleeper = _claimed(driver, "sleeper")
        _put(driver, sleeper, "fetch")
        assert not driver.step_sleep(job_lease(sleeper), StepSleep("cool off", 3_600_000, 1)).done
        waiter = _claimed(driver, "waiter")
        assert not driver.step_wait(job_lease(waiter), StepWait("paid", "order.paid", "o-1", None, None, 1)).done
    finally:
        driver.close()
    shown = as_json(xjobsd("jobs", "show", str(sleeper.id), "--json"))
    assert shown["state"] == "suspended" and shown["attempt"] == 0
    assert [(s["name"], s["kind"], s["state"], s["attempt"]) for s in shown["steps"]] == [
        ("fetch", "run", "completed", 1), ("cool off", "sleep", "sleeping", 1)]
    assert shown["steps"][0]["duration_ms"] == pytest.approx(3.0, abs=0.01)
    assert "result" not in shown["steps"][0]          # the application's data stays out
    assert shown["waiting_for"]["step"] == "cool off" and shown["waiting_for"]["sleep"] is True
    assert shown["waiting_for"]["until"].endswith("+00:00")    # ISO-8601
    text = xjobsd("jobs", "show", str(sleeper.id)).stdout
    assert "waiting for" in text and "sleep until" in text and "cool off" in text and "STATE" in text
    waits = as_json(xjobsd("jobs", "show", str(waiter.id), "--json"))["waiting_for"]
    assert waits == {"step": "paid", "event": "order.paid", "key": "o-1", "until": None}
    assert "event 'order.paid' key 'o-1' (no timeout)" in xjobsd("jobs", "show", str(waiter.id)).stdout


def test_retry_from_a_step_reopens_it_and_every_later_one(xjobsd, pg_dsn, pg_schema):
    xjobsd("migrate")
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    try:
        done = _claimed(driver, "done")
        _put(driver, done, "a", "b", "c")
        assert driver.job_ack(done.id, done.token)
        live = _claimed(driver, "live")
        _put(driver, live, "a")
    finally:
        driver.close()
    xjobsd("jobs", "retry", str(done.id), "--from-step", "zzz", expect=1)        # never recorded
    xjobsd("jobs", "retry", str(live.id), "--from-step", "a", expect=1)          # still running
    xjobsd("jobs", "retry", "--all", "--from-step", "a", expect=2)               # one job only
    again = as_json(xjobsd("jobs", "retry", str(done.id), "--from-step", "b", "--json"))
    assert again["state"] == "ready" and again["attempt"] == 0
    assert [s["name"] for s in again["steps"]] == ["a"]
    assert again["history"][-1]["outcome"] == "requeued" and "from step b" in again["history"][-1]["error"]


def test_show_prints_a_failed_attempts_traceback_whole(xjobsd, pg_dsn, pg_schema):
    from xjobs.drivers.base import Nack
    xjobsd("migrate")
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    trace = "Traceback (most recent call last):\n" + "".join(
        f'  File "app.py", line {n}, in step_{n}\n    call_{n}()\n' for n in range(60)) + "ValueError: boom\n"
    try:
        job = _claimed(driver, "failing")
        assert driver.job_nack(Nack(job.id, job.token, "dead", error="ValueError: boom -- dead", traceback=trace))
    finally:
        driver.close()
    text = xjobsd("jobs", "show", str(job.id)).stdout
    assert "traceback of attempt 1 (dead at " in text and trace.rstrip("\n") in text   # every line
    assert as_json(xjobsd("jobs", "show", str(job.id), "--json"))["history"][-1]["traceback"] == trace
