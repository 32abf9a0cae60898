"""Conformance of job results on both drivers: the batched ack and the fenced completion of
``job_transaction`` store what the body returned (NULL for None), ``job_get`` reads it, a lost
fence stores nothing, and the result goes with its row when retention prunes the job.

Every test runs against the memory and the Postgres driver on the shared ManualClock.
"""

from __future__ import annotations

import orjson
import pytest

from tests.drivers.parity import enqueue, run
from xjobs.drivers.base import Lease, ListFilter, Nack
from xjobs.errors import InvalidOption, JobNotFound, LeaseLost


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
