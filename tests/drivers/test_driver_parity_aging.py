"""Conformance of priority aging (``job_age``) on both drivers: a ready row of the queue gains a
level per step waited, counted from the priority it was enqueued at and kept in
``base_priority``, down to the floor; rows at or below the floor, running, suspended or of
another queue are left alone; the batch is bounded, oldest first; a retried row keeps what it
gained; the claim order follows the new priorities; bad arguments are refused.

Every test runs against the memory and the Postgres driver on the shared ManualClock.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.drivers.parity import claim, claim_one, enqueue
from xjobs.drivers.base import Aging, Nack
from xjobs.errors import InvalidOption

STEP = 1_000.0


def priorities(driver, *ids: int) -> list[tuple[int, int | None]]:
    return [(view.priority, view.base_priority) for view in map(driver.job_get, ids)]


def test_a_waiting_row_gains_a_level_per_step_down_to_the_floor(driver, clock):
    job_id = enqueue(driver, "old", priority=5)
    aging = Aging("default", STEP, 2)
    assert driver.job_age(aging) == 0                        # not a step old yet
    assert priorities(driver, job_id) == [(5, None)]
    clock.advance(STEP - 1)
    assert driver.job_age(aging) == 0
    clock.advance(1)
    assert driver.job_age(aging) == 1
    assert priorities(driver, job_id) == [(4, 5)]
    assert driver.job_age(aging) == 0                        # nothing more earned within the step
    clock.advance(2.5 * STEP)                                # 3.5 steps in all: 5 - 3
    assert driver.job_age(aging) == 1
    assert priorities(driver, job_id) == [(2, 5)]
    clock.advance(10 * STEP)
    assert driver.job_age(aging) == 0                        # at the floor: never past it
    assert priorities(driver, job_id) == [(2, 5)]


def test_rows_at_or_below_the_floor_and_rows_that_do_not_wait_ready_are_left_alone(driver, clock):
    running = enqueue(driver, "running", priority=4)
    assert claim_one(driver).id == running
    urgent = enqueue(driver, "urgent", priority=-3)
    level = enqueue(driver, "level", priority=0)
    other = enqueue(driver, "other", queue="other", priority=4)
    later = enqueue(driver, "later", priority=4, run_at_ms=clock.now_ms() + 60 * STEP)
    clock.advance(5 * STEP)
    assert driver.job_age(Aging("default", STEP, 0)) == 0
    assert priorities(driver, urgent, level, other, running, later) == [
        (-3, None), (0, None), (4, None), (4, None), (4, None)]


def test_a_batch_is_bounded_oldest_first_and_the_next_takes_the_rest(driver, clock):
    ids = []
    for n in range(3):
        ids.append(enqueue(driver, f"k{n}", priority=3 - n % 2))   # levels 3, 2, 3: one batch over both
        clock.advance(10)
    clock.advance(STEP)
    aging = Aging("default", STEP, 0)
    assert driver.job_age(aging, limit=2) == 2
    assert priorities(driver, *ids) == [(2, 3), (1, 2), (3, None)]
    assert driver.job_age(aging, limit=2) == 1
    assert priorities(driver, *ids) == [(2, 3), (1, 2), (2, 3)]
    assert driver.job_age(aging, limit=0) == 0


def test_aged_rows_are_claimed_in_their_new_order(driver, clock):
    patient = enqueue(driver, "patient", priority=9)
    clock.advance(STEP / 2)
    stream = [enqueue(driver, f"s{n}", priority=0) for n in range(3)]
    clock.advance(8.5 * STEP)                                # 9 steps: 9 - 9 is level with the stream
    aging = Aging("default", STEP, 0)
    assert driver.job_age(aging) == 1
    assert [job.id for job in claim(driver, limit=2)] == [patient, stream[0]]   # level, and older


def test_a_retried_row_keeps_what_it_gained_and_ages_again_from_its_new_run_at(driver, clock):
    job_id = enqueue(driver, "r", priority=6)
    clock.advance(3 * STEP)
    aging = Aging("default", STEP, 0)
    assert driver.job_age(aging) == 1
    assert priorities(driver, job_id) == [(3, 6)]
    job = claim_one(driver)
    assert job.priority == 3
    assert driver.job_nack(Nack(job.id, job.token, "retried", "boom", 0.0))
    assert priorities(driver, job_id) == [(3, 6)]            # a settlement never worsens it
    clock.advance(3.5 * STEP)                                # 6 - 3: nothing better than it has
    assert driver.job_age(aging) == 0
    clock.advance(STEP)                                      # 6 - 4
    assert driver.job_age(aging) == 1
    assert priorities(driver, job_id) == [(2, 6)]


@pytest.mark.parametrize("aging, option", [
    (Aging("default", 0.0, 0), "aging.step"),
    (Aging("default", float("nan"), 0), "aging.step"),
    (Aging("default", -5.0, 0), "aging.step"),
    (Aging("default", STEP, 40_000), "aging.floor"),
    (Aging("", STEP, 0), "aging.queue"),
])
def test_a_bad_aging_is_refused_before_anything_is_read(driver, aging, option):
    with pytest.raises(InvalidOption) as err:
        driver.job_age(aging)
    assert err.value.code == "X_INVALID_OPTION" and err.value.option == option
    with pytest.raises(InvalidOption) as err:
        driver.job_age(Aging("default", STEP, 0), limit=-1)
    assert err.value.option == "aging.limit"


@pytest.mark.postgres
def test_a_row_a_claim_holds_is_skipped_not_waited_on(pg_driver, pg_dsn, clock):
    held, free = enqueue(pg_driver, "held", priority=4), enqueue(pg_driver, "free", priority=4)
    clock.advance(STEP)
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute(f"select id from {pg_driver.schema}.jobs where id = %s for update", (held,))
        blocker.execute("select 1")   # the lock is taken; aging must not wait for its commit
        assert pg_driver.job_age(Aging("default", STEP, 0)) == 1
        blocker.rollback()
    assert priorities(pg_driver, held, free) == [(4, None), (3, 4)]
