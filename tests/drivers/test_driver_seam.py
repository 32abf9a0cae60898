"""Conformance of the seam itself, on both drivers: the capabilities every consumer may now
call without asking (listen, ping, migrate, session_count) and the one it asks for (slots),
the refusals the checked facade makes once for every driver, the operator's refusal texts,
identical on both, batched settlements, and the database's failures as the driver's errors."""

from __future__ import annotations

import math
import select
import time

import psycopg
import pytest

from tests.drivers.parity import claim_one, enqueue
from xjobs.drivers.base import Claim, JobDriver, Lease, ListFilter, Nack, SlotStore
from xjobs.drivers.postgres import PostgresDriver
from xjobs.errors import (DatabaseUnavailable, DuplicateJob, InvalidOption, JobNotFound, NotCancellable,
                          NotRetryable, SchemaMissing)


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
    with pytest.raises(DatabaseUnavailable) as err:
        driver.ping(2)
    assert err.value.code == "X_DATABASE_UNAVAILABLE" and isinstance(err.value.__cause__, psycopg.OperationalError)


def test_ages_in_a_filter_may_be_durations_and_are_normalised(driver, clock):
    job_id = enqueue(driver, "k")
    clock.advance(60_000)
    assert [v.id for v in driver.job_list(ListFilter(since_ago_ms="2m"))] == [job_id]  # type: ignore[arg-type]
    assert driver.job_list(ListFilter(until_ago_ms="2m")) == []  # type: ignore[arg-type]
    assert [v.id for v in driver.job_list(ListFilter(limit=1.0))] == [job_id]  # type: ignore[arg-type]


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
    driver.job_nack(Nack(dead.id, dead.token, "dead", error="boom"))
    enqueue(driver, "d")
    with pytest.raises(DuplicateJob) as held:
        driver.job_requeue(dead_id)
    assert str(held.value) == (f"X_JOB_DUPLICATE: job {dead_id}: a live job already holds its "
                               "idempotency key")


def test_nacks_settle_in_one_batch_each_as_its_outcome_and_fenced_on_its_own_claim(driver, clock):
    ids = [enqueue(driver, f"k{n}") for n in range(5)]
    jobs = {job.id: job for job in driver.job_claim(Claim(["default"], 5, 30_000, "w"))}
    retried, dead, interrupted, shed, stale = (jobs[i] for i in ids)
    clock.advance(10)
    settled = driver.job_nack_many([
        Nack(retried.id, retried.token, "retried", error="boom", delay_ms=1000),
        Nack(dead.id, dead.token, "dead", error="terminal"),
        Nack(interrupted.id, interrupted.token, "interrupted", error="drained"),
        Nack(shed.id, shed.token, "shed"),
        Nack(stale.id, stale.token + 1, "retried", error="not mine"),
        Nack(shed.id, shed.token + 1, "dead", error="a displaced claim of the same job")])
    assert settled == {retried.id, dead.id, interrupted.id, shed.id}
    views = {i: driver.job_get(i) for i in ids}
    assert [(views[i].state, views[i].attempt) for i in ids] == \
        [("ready", 1), ("dead", 1), ("ready", 0), ("ready", 0), ("running", 1)]
    assert [[h["outcome"] for h in views[i].history] for i in ids] == \
        [["retried"], ["dead"], ["interrupted"], [], []]
    assert driver.job_nack_many([]) == set()


@pytest.mark.parametrize("bad", [
    lambda job: [Nack(job.id, job.token, "retried"), Nack(job.id, job.token, "dead")],   # one job twice
    lambda job: [Nack(job.id, job.token, "shed", error="a shed is no failure")],
    lambda job: [Nack(job.id, job.token, "suspended", error="nor a suspension", delay_ms=10)],
    lambda job: [Nack(job.id, job.token, "dead", delay_ms=5)],
    lambda job: [Nack(job.id, job.token, "interrupted", traceback="only a failure has one")],
    lambda job: [Nack(job.id, job.token, "parked")],   # type: ignore[arg-type]
], ids=["twice", "shed-error", "suspended-error", "dead-delay", "interrupted-traceback", "unknown"])
def test_a_settlement_that_cannot_be_is_refused_and_nothing_is_written(driver, bad):
    enqueue(driver, "k")
    job = claim_one(driver)
    with pytest.raises(InvalidOption):
        driver.job_nack_many(bad(job))
    assert driver.job_get(job.id).state == "running"


def test_fleet_wide_slots_are_a_capability_both_drivers_declare(driver):
    assert isinstance(driver, SlotStore) and not hasattr(JobDriver, "slot_acquire")


@pytest.mark.postgres
def test_an_unreachable_database_is_the_drivers_own_error_on_every_verb():
    driver = PostgresDriver("postgresql://postgres@127.0.0.1:1/postgres", pool_timeout=0.3)
    try:
        for verb in (lambda: driver.job_stats(), lambda: driver.job_claim(Claim(["q"], 1, 1000, "w")),
                     lambda: driver.job_nack_many([Nack(1, 1, "retried")]), lambda: driver.migrate()):
            with pytest.raises(DatabaseUnavailable) as err:
                verb()
            assert isinstance(err.value.__cause__, psycopg.OperationalError)
        with pytest.raises(DatabaseUnavailable):
            with driver.job_transaction(Lease(1, 1)):
                pass
    finally:
        driver.close()


@pytest.mark.postgres
def test_a_schema_nothing_installed_is_schema_missing(pg_dsn):
    driver = PostgresDriver(pg_dsn, schema="xjobs_never_installed")
    try:
        with pytest.raises(SchemaMissing) as err:
            driver.job_stats()
        assert err.value.code == "X_SCHEMA_MISSING"
    finally:
        driver.close()
