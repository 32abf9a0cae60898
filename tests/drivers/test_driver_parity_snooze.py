"""Conformance of snooze and debounce on both drivers: the ``snoozed`` nack (ready again after
its delay, the attempt given back, no error, ``snoozes`` counted and handed to the next claim,
a history line), an operator's retry resetting the count, and ``job_debounce`` (the held key's
job that has not started takes the newest input and a later start, bounded by its first
enqueue; one that started is answered as a duplicate).

Every test runs against the memory and the Postgres driver on the shared ManualClock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import psycopg
import pytest

import xjobs
from tests.drivers.parity import at, claim_one, enqueue, new_job
from tests.waiting import wait_for
from xjobs.drivers.base import Nack, NewJob
from xjobs.enqueue import aenqueue_many
from xjobs.reads import Enqueued
from xjobs.errors import InvalidOption


def debounced(key: str, value: int, debounce_ms: float = 1_000.0, most_ms: float = 5_000.0) -> NewJob:
    return new_job(key, payload={"key": key, "v": value})._replace(delay_ms=debounce_ms, debounce_ms=debounce_ms,
                                                                  debounce_max_ms=most_ms)


def test_a_snoozed_nack_gives_the_attempt_back_and_counts_the_snooze(driver, clock):
    job_id = enqueue(driver, max_attempts=1)
    for n in (1, 2):
        job = claim_one(driver)
        assert (job.id, job.attempt, job.snoozes) == (job_id, 1, n - 1)
        assert driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=2_000))
        view = driver.job_get(job_id)
        assert (view.state, view.attempt, view.snoozes, view.last_error) == ("ready", 0, n, None)
        assert at(view.run_at) == at(clock.now_ms() + 2_000)
        clock.advance(2_000)
    job = claim_one(driver)
    assert job.snoozes == 2
    assert driver.job_ack(job.id, job.token)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.snoozes) == ("completed", 1, 2)
    assert [(h["outcome"], h["attempt"], h["error"]) for h in view.history] == [
        ("snoozed", 1, None), ("snoozed", 1, None)]


def test_a_snooze_is_fenced_on_its_claim_and_carries_no_error(driver):
    job_id = enqueue(driver)
    job = claim_one(driver)
    assert not driver.job_nack(Nack(job.id, job.token + 1, "snoozed", delay_ms=1_000))
    assert driver.job_get(job_id).snoozes == 0
    with pytest.raises(InvalidOption):
        driver.job_nack(Nack(job.id, job.token, "snoozed", "an error", 1_000))


def test_an_operators_retry_resets_the_snoozes(driver):
    job_id = enqueue(driver)
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=0))
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", "X_SNOOZE_LIMIT: too many"))
    assert driver.job_get(job_id).snoozes == 1
    assert driver.job_requeue(job_id).snoozes == 0
    assert claim_one(driver).snoozes == 0


def test_debounce_moves_the_waiting_holder_with_the_newest_input(driver, clock):
    created = clock.now_ms()
    [first] = driver.job_enqueue([debounced("d", 1)])
    assert (first.deduped, first.debounced) == (False, False)
    assert at(driver.job_get(first.id).run_at) == at(created + 1_000)
    clock.advance(700)
    [again] = driver.job_enqueue([debounced("d", 2)])
    assert (again.id, again.deduped, again.debounced) == (first.id, True, True)
    view = driver.job_get(first.id)
    assert (view.payload, at(view.run_at)) == ({"key": "d", "v": 2}, at(clock.now_ms() + 1_000))
    clock.advance(4_500)          # past the bound: the first enqueue plus debounce_max
    [late] = driver.job_enqueue([debounced("d", 3)])
    assert late.debounced and at(driver.job_get(first.id).run_at) == at(created + 5_000)


def test_one_batch_keeps_the_last_input_of_each_key(driver):
    answers = driver.job_enqueue([debounced("a", 1), debounced("b", 1), debounced("a", 2), debounced("a", 3)])
    assert [(e.deduped, e.debounced) for e in answers] == [(False, False), (False, False), (True, True), (True, True)]
    assert answers[0].id == answers[2].id == answers[3].id != answers[1].id
    assert driver.job_get(answers[0].id).payload == {"key": "a", "v": 3}


def test_a_holder_that_started_or_was_claimed_before_is_answered_as_a_duplicate(driver, clock):
    [first] = driver.job_enqueue([debounced("s", 1)])
    clock.advance(1_000)
    job = claim_one(driver)
    [running] = driver.job_enqueue([debounced("s", 2)])
    assert (running.id, running.deduped, running.debounced) == (first.id, True, False)
    driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=10_000))   # ready again, but it ran
    [snoozed] = driver.job_enqueue([debounced("s", 3)])
    assert (snoozed.deduped, snoozed.debounced) == (True, False)
    assert driver.job_get(first.id).payload == {"key": "s", "v": 1}


def test_a_job_without_debounce_is_deduped_as_before(driver):
    job_id = enqueue(driver, "p")
    [dup] = driver.job_enqueue([new_job("p", payload={"other": 1})])
    assert (dup.id, dup.deduped, dup.debounced) == (job_id, True, False)
    assert driver.job_get(job_id).payload == {"key": "p"}


def test_an_awaited_enqueue_in_the_callers_transaction_debounces(pg_driver, pg_dsn):
    handle = xjobs.job(queue="default", idempotency_key=lambda i: "one", tenant="none", debounce="1s",
                       registry=xjobs.Registry(), name="awaited")(lambda ctx, i: None)

    async def twice() -> list[Enqueued]:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            return (await aenqueue_many(handle, [{"v": 1}], conn=conn, driver=pg_driver)
                    + await aenqueue_many(handle, [{"v": 2}], conn=conn, driver=pg_driver))
    first, again = asyncio.run(twice())
    assert (again.id, again.deduped, again.debounced) == (first.id, True, True)
    assert pg_driver.job_get(first.id).payload == {"v": 2}


def test_a_debounced_enqueue_of_a_waiting_key_is_one_update_and_takes_no_id(driver):
    [first] = driver.job_enqueue([debounced("i", 1)])
    assert driver.job_enqueue([debounced("i", 2)])[0].debounced     # job_debounce alone: no insert
    [other] = driver.job_enqueue([debounced("j", 1)])
    assert other.id == first.id + 1


def test_a_debounce_that_waits_on_a_claims_lock_answers_a_duplicate_once_the_claim_commits(pg_driver):
    """The holder is locked as it is found: a debounce queued behind a claim that has not
    committed yet rechecks the claimed row, leaves it as the claim wrote it, and says so."""
    [first] = pg_driver.job_enqueue([debounced("race", 1)])
    with psycopg.connect(pg_driver.dsn) as claimer:
        pid = claimer.execute("select pg_backend_pid()").fetchone()[0]   # type: ignore[index]
        claimer.execute(f"update {pg_driver.schema}.jobs set state = 'running', started_at = now() "
                        f"where id = %s", (first.id,))
        answers: list[Enqueued] = []
        thread = threading.Thread(target=lambda: answers.extend(pg_driver.job_enqueue([debounced("race", 2)])))
        thread.start()
        with psycopg.connect(pg_driver.dsn, autocommit=True) as watcher:
            wait_for(lambda: watcher.execute("select 1 from pg_locks where not granted and pid <> %s "
                                             "and pid in (select pid from pg_stat_activity)", (pid,)).fetchone(),
                     10, "the debounce waiting on the claim's row lock")
        claimer.commit()
        thread.join(10)
    assert [(a.id, a.deduped, a.debounced) for a in answers] == [(first.id, True, False)]
    assert pg_driver.job_get(first.id).payload == {"key": "race", "v": 1}
