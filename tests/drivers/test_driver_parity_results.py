"""Conformance of job results on both drivers: the batched ack and the fenced completion of
``job_transaction`` store what the body returned (NULL for None), ``job_get`` reads it, a lost
fence stores nothing, and the result goes with its row when retention prunes the job.

Every test runs against the memory and the Postgres driver on the shared ManualClock.
"""

from __future__ import annotations

import asyncio
import math
import threading

import orjson
import psycopg
import pytest

import xjobs

from tests.drivers.parity import enqueue, run
from xjobs.drivers.base import Lease, ListFilter, Nack
from xjobs.errors import (InvalidOption, JobCancelled, JobFailed, JobNotFound, LeaseLost, ResultTimeout,
                          XJobsError)


def encoded(value: object) -> bytes:
    return orjson.dumps(value)


def test_ack_many_stores_each_result_and_none_stays_null(driver):
    a, lease_a = run(driver, "a")
    b, lease_b = run(driver, "b")
    c, lease_c = run(driver, "c")
    results = {a: encoded({"total": 3, "items": [1, "two", None]}), c: encoded("done")}
    assert driver.job_ack_many([lease_a, lease_b, lease_c], results) == {a, b, c}
    assert driver.job_get(a).result == {"total": 3, "items": [1, "two", None]}
    assert driver.job_get(b).result is None
    assert driver.job_get(c).result == "done"
    assert driver.job_get(a).state == "completed"
    # what job_list shows carries no result: it is read one job at a time
    assert all(view.result is None for view in driver.job_list(ListFilter()))


def test_a_stale_fence_stores_no_result(driver):
    job_id, lease = run(driver)
    stale = Lease(job_id, lease.token + 1)
    assert driver.job_ack_many([stale], {job_id: encoded(1)}) == set()
    assert driver.job_get(job_id).state == "running" and driver.job_get(job_id).result is None
    assert driver.job_ack_many([lease], {job_id: encoded([])}) == {job_id}
    assert driver.job_get(job_id).result == []


def test_a_fenced_completion_stores_the_result_it_reads_at_commit(driver):
    job_id, lease = run(driver)
    box: list[bytes | None] = [None]
    with driver.job_transaction(lease, result=lambda: box[0]):
        box[0] = encoded({"rows": 2})      # set inside the block, read when the job completes
    view = driver.job_get(job_id)
    assert (view.state, view.result) == ("completed", {"rows": 2})
    other, other_lease = run(driver, "other")
    with driver.job_transaction(other_lease):
        pass
    assert driver.job_get(other).result is None


def test_a_lost_lease_in_the_transaction_stores_nothing(driver):
    job_id, lease = run(driver)
    driver.job_cancel(job_id, "stop")
    with pytest.raises(LeaseLost):
        with driver.job_transaction(lease, result=lambda: encoded("never")):
            pass
    assert driver.job_get(job_id).result is None


def test_a_failed_run_has_no_result(driver):
    job_id, lease = run(driver, max_attempts=1)
    assert driver.job_nack_many([Nack(job_id, lease.token, "dead", "boom")]) == {job_id}
    view = driver.job_get(job_id)
    assert (view.state, view.result, view.last_error) == ("dead", None, "boom")


def test_results_that_are_not_encoded_json_are_refused(driver):
    job_id, lease = run(driver)
    with pytest.raises(InvalidOption) as err:
        driver.job_ack_many([lease], {job_id: {"not": "bytes"}})
    assert err.value.code == "X_INVALID_OPTION" and "result" in str(err.value)
    assert driver.job_get(job_id).state == "running"


def test_the_result_is_pruned_with_its_job(driver, clock):
    job_id, lease = run(driver)
    assert driver.job_ack_many([lease], {job_id: encoded({"big": "x" * 1000})}) == {job_id}
    clock.advance(60_000)
    assert driver.job_prune(1_000, 1_000) == 1
    with pytest.raises(JobNotFound):
        driver.job_get(job_id)
    keep = enqueue(driver, "kept")
    assert driver.job_get(keep).result is None


# -- job_await and xjobs.result ---------------------------------------------------------------------


def _waiting(driver, job_id: int, timeout_s: float = 30.0):
    """``xjobs.result`` on a thread of its own: (the thread, what it answered or raised)."""
    answered: list[object] = []

    def wait() -> None:
        try:
            answered.append(("value", xjobs.result(job_id, timeout_s, driver=driver)))
        except XJobsError as exc:
            answered.append(("error", exc))
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, answered


def test_result_wakes_a_waiter_when_the_batch_completes_its_job(driver):
    job_id, lease = run(driver)
    other, other_lease = run(driver, "other")
    thread, answered = _waiting(driver, job_id)
    assert driver.job_ack_many([other_lease, lease], {job_id: encoded({"n": 1}), other: encoded(2)}) == {job_id, other}
    thread.join(30)
    assert answered == [("value", {"n": 1})]
    assert xjobs.result(other, driver=driver) == 2            # settled already: read at once
    assert driver.job_await(other, 0).result == 2


def test_result_raises_the_dead_jobs_error_and_the_cancel(driver):
    job_id, lease = run(driver, max_attempts=1)
    thread, answered = _waiting(driver, job_id)
    driver.job_nack_many([Nack(job_id, lease.token, "dead", "ValueError: no such card -- dead")])
    thread.join(30)
    [(kind, error)] = answered
    assert kind == "error" and isinstance(error, JobFailed) and error.code == "X_JOB_FAILED"
    assert error.last_error == "ValueError: no such card -- dead" and "no such card" in str(error)
    ready = enqueue(driver, "ready")
    thread, answered = _waiting(driver, ready)
    driver.job_cancel(ready, "not needed")
    thread.join(30)
    [(kind, error)] = answered
    assert isinstance(error, JobCancelled) and error.code == "X_JOB_CANCELLED" and error.reason == "not needed"


def test_result_times_out_and_leaves_the_job_as_it_is(driver):
    job_id, lease = run(driver)
    with pytest.raises(ResultTimeout) as err:
        xjobs.result(job_id, 0.05, driver=driver)
    assert err.value.code == "X_TIMEOUT" and isinstance(err.value, TimeoutError)
    assert driver.job_await(job_id, 0).state == "running"
    assert driver.job_ack_many([lease]) == {job_id}
    assert xjobs.result(job_id, 0, driver=driver) is None     # a body that returned None


def test_result_of_a_job_completed_in_its_transaction(driver):
    job_id, lease = run(driver)
    thread, answered = _waiting(driver, job_id)
    with driver.job_transaction(lease, result=lambda: encoded(["a", "b"])):
        pass
    thread.join(30)
    assert answered == [("value", ["a", "b"])]


@pytest.mark.parametrize("call", [
    lambda d: xjobs.result(10**30, driver=d), lambda d: d.job_await(999_999, 0), lambda d: d.job_await(True, 0),
], ids=["huge-id", "unknown-id", "bool-id"])
def test_result_of_an_unknown_job_is_refused(driver, call):
    with pytest.raises(JobNotFound):
        call(driver)


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1, True, "5"])
def test_a_bad_timeout_is_refused(driver, timeout):
    job_id, _ = run(driver)
    with pytest.raises(InvalidOption) as err:
        xjobs.result(job_id, timeout, driver=driver)
    assert err.value.option == "timeout"


def test_aresult_awaits_the_same_answers(driver):
    async def scenario() -> None:
        job_id, lease = run(driver)
        waiting = asyncio.ensure_future(xjobs.aresult(job_id, 30, driver=driver))
        await asyncio.sleep(0)                                 # let the waiter begin
        await asyncio.to_thread(driver.job_ack_many, [lease], {job_id: encoded({"async": True})})
        assert await waiting == {"async": True}
        dead, dead_lease = run(driver, "dead", max_attempts=1)
        driver.job_nack_many([Nack(dead, dead_lease.token, "dead", "boom")])
        with pytest.raises(JobFailed):
            await xjobs.aresult(dead, driver=driver)
        live, _ = run(driver, "live")
        with pytest.raises(ResultTimeout):
            await xjobs.aresult(live, 0.05, driver=driver)
    asyncio.run(scenario())


@pytest.mark.postgres
def test_a_batch_of_completions_is_told_in_notes_of_at_most_300_ids(pg_driver, pg_dsn):
    from tests.drivers.parity import claim, new_job
    pg_driver.job_enqueue([new_job(f"k{n}") for n in range(700)])
    leases = [Lease(job.id, job.token) for job in claim(pg_driver, limit=700)]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'listen "{pg_driver.database.settled_channel}"')
        assert len(pg_driver.job_ack_many(leases)) == 700
        notes = [note.payload for note in conn.notifies(timeout=2.0, stop_after=3)]
    assert len(notes) == 3 and all(len(note.encode()) < 8000 for note in notes)
    assert sorted(int(i) for note in notes for i in note.split(",")) == sorted(l.job_id for l in leases)
