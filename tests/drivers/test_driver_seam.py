"""Conformance of the seam itself, on both drivers: the capabilities every consumer may now
call without asking (listen, ping, migrate, session_count), the refusals the checked facade
makes once for every driver, and the operator's refusal texts, identical on both."""

from __future__ import annotations

import math
import select
import time

import psycopg
import pytest

from tests.drivers.parity import claim_one, enqueue
from xjobs.drivers.base import ListFilter, Nack
from xjobs.drivers.postgres import PostgresDriver
from xjobs.errors import DuplicateJob, InvalidOption, JobNotFound, NotCancellable, NotRetryable


def test_every_driver_answers_a_listener(driver):
    listener = driver.job_listen()
    try:
        assert listener.poll() == set()
        fd = listener.fileno()
        if fd is None:             # memory: nothing to wait on, workers poll
            enqueue(driver, "k")
            assert listener.poll() == set()
            return
        enqueue(driver, "k", queue="emails")
        deadline, seen = time.monotonic() + 10, set()
        while "emails" not in seen and time.monotonic() < deadline:
            select.select([fd], [], [], 0.5)
            seen |= listener.poll()
        assert "emails" in seen
    finally:
        listener.close()


def test_every_driver_pings_and_migrates_and_counts_sessions(driver):
    driver.ping(5)
    driver.migrate()                              # idempotent on an installed schema
    assert driver.session_count("nobody-is-called-this") == 0


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5s", True])
def test_lifecycle_arguments_are_refused_the_same_on_every_driver(driver, bad):
    with pytest.raises(InvalidOption) as err:
        driver.ping(bad)
    assert err.value.option == "ping.timeout"
    with pytest.raises(InvalidOption) as err:
        driver.migrate(lock_timeout_ms=bad)
    assert err.value.option == "migrate.lock_timeout"


def test_a_ping_of_an_unreachable_server_raises():
    driver = PostgresDriver("postgresql://postgres@127.0.0.1:1/postgres")
    with pytest.raises(psycopg.OperationalError):
        driver.ping(2)


def test_ages_in_a_filter_may_be_durations_and_are_normalised(driver, clock):
    job_id = enqueue(driver, "k")
    clock.advance(60_000)
    assert [v.id for v in driver.job_list(ListFilter(since_ago_ms="2m"))] == [job_id]
    assert driver.job_list(ListFilter(until_ago_ms="2m")) == []
    assert [v.id for v in driver.job_list(ListFilter(limit=1.0))] == [job_id]


def test_the_operator_refusals_say_the_same_on_every_driver(driver):
    job_id = enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    with pytest.raises(NotCancellable) as cancelled:
        driver.job_cancel(job_id)
    assert str(cancelled.value) == (f"X_JOB_NOT_CANCELLABLE: job {job_id} is completed; "
                                    "only ready, running or suspended jobs can be cancelled")
    with pytest.raises(NotRetryable) as retried:
        driver.job_requeue(job_id)
    assert str(retried.value) == (f"X_JOB_NOT_RETRYABLE: job {job_id} is completed; "
                                  "only dead or cancelled jobs can be retried")
    with pytest.raises(JobNotFound) as missing:
        driver.job_requeue(10_000)
    assert str(missing.value) == "X_JOB_NOT_FOUND: no job with id 10000"
    dead_id = enqueue(driver, "d")
    dead = claim_one(driver)
    driver.job_nack(Nack(dead.id, dead.token, "boom", dead=True, outcome="dead"))
    enqueue(driver, "d")
    with pytest.raises(DuplicateJob) as held:
        driver.job_requeue(dead_id)
    assert str(held.value) == (f"X_JOB_DUPLICATE: job {dead_id}: a live job already holds its "
                               "idempotency key")
