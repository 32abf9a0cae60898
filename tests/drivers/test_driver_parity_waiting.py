"""Conformance of ``queue_waiting`` on both drivers: the live jobs that wait, per queue and
reason, as ``/metrics`` (``xjobs_queue_waiting_jobs``) and ``xjobsd status`` show them. A job due now
waits for nothing and is counted in neither reason."""

from __future__ import annotations


from tests.drivers.parity import claim_one, enqueue, new_job
from xjobs.drivers.base import Nack, NewJob
from xjobs.drivers.records import WAITING_REASONS

HOUR = 3_600_000.0


def member(key: str, account: str, cap: int) -> NewJob:
    return new_job(key, name="sync", queue="keys")._replace(concurrency_key=account, key_cap=cap)


def test_waiting_jobs_are_counted_per_queue_by_reason(driver, clock):
    assert driver.queue_waiting() == {}
    driver.job_enqueue([member(f"a{i}", "a", 2) for i in range(3)])          # one waits for key a
    driver.job_enqueue([member(f"s{i}", "s", 1) for i in range(3)])          # two wait in sequence s
    later = clock.now_ms() + HOUR
    enqueue(driver, "due")                                                   # due now: waits for nothing
    enqueue(driver, "later", run_at_ms=later)
    driver.job_enqueue([new_job("rated", run_at_ms=later)._replace(rate_key="r")])
    enqueue(driver, "snoozer", queue="naps")
    job = claim_one(driver, "naps")
    assert driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=60_000))
    assert driver.queue_waiting() == {"keys": {"key": 1, "sequence": 2},
                                      "default": {"scheduled": 1, "rate": 1},
                                      "naps": {"snoozed": 1}}
    assert {r for per in driver.queue_waiting().values() for r in per} <= set(WAITING_REASONS)
    clock.advance(60_000)                    # the snooze is over: it is due, so it waits no more
    assert "naps" not in driver.queue_waiting()
    clock.advance(HOUR)
    assert driver.queue_waiting() == {"keys": {"key": 1, "sequence": 2}}
