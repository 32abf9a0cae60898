"""Conformance of ``ClaimedJob.first_claim`` on both drivers: true only when the job was never
claimed before, by every kind of claim, so a run may skip reading recorded steps. Every way a
job comes back to ready after a claim (a retry, an interrupted run, a snooze, a wake-up from a
sleep, a rescue, a requeue, a crash hand-back) makes its next claim a later one."""

from __future__ import annotations

from tests.drivers.parity import LEASE, claim, claim_one, enqueue, new_job, put, run, sleep
from xjobs.drivers.base import Claim, ClaimAlone, Nack, WorkerExit
from xjobs.drivers.fair import FairClaim


def _first(jobs) -> dict[int, bool]:
    return {job.id: job.first_claim for job in jobs}


def test_a_new_job_is_a_first_claim_and_every_later_claim_is_not(driver):
    a, b = enqueue(driver, "a"), enqueue(driver, "b")
    [job_a] = claim(driver, limit=1)
    assert (job_a.id, job_a.first_claim) == (a, True)
    assert driver.job_nack(Nack(a, job_a.token, "retried", error="boom")) is True
    # one claim takes a job claimed before beside a new one, and tells them apart
    assert _first(claim(driver)) == {a: False, b: True}


def test_each_way_back_to_ready_makes_the_next_claim_a_later_one(driver):
    for outcome in ("retried", "interrupted", "snoozed", "shed"):
        job_id = enqueue(driver, outcome, queue=outcome)
        job = claim_one(driver, queue=outcome)
        assert (job.id, job.first_claim) == (job_id, True)
        assert driver.job_nack(Nack(job.id, job.token, outcome)) is True
        [again] = claim(driver, queue=outcome)
        charged = outcome == "retried"
        assert (again.id, again.attempt, again.first_claim) == (job_id, 2 if charged else 1, False)


def test_a_woken_sleeper_is_not_a_first_claim_though_its_attempt_was_given_back(driver, clock):
    job_id, lease = run(driver)
    assert put(driver, lease, "charge") is True
    assert sleep(driver, lease, "nap", 1000).done is False
    clock.advance(1000)
    assert driver.job_wake() == 1
    [woken] = claim(driver)
    assert (woken.id, woken.attempt, woken.first_claim) == (job_id, 1, False)
    assert [s.name for s in driver.step_list(job_id).steps] == ["charge", "nap"]


def test_a_rescued_requeued_or_handed_back_job_is_not_a_first_claim(driver, clock):
    rescued = enqueue(driver, "rescued")
    claim_one(driver, lease=1000)
    clock.advance(1001)
    assert driver.job_rescue() == 1
    assert _first(claim(driver)) == {rescued: False}
    requeued = enqueue(driver, "requeued")
    job = claim_one(driver)
    assert driver.job_nack(Nack(requeued, job.token, "dead", error="boom")) is True
    driver.job_requeue(requeued)    # the operator's retry of a dead letter
    assert _first(claim(driver)) == {requeued: False}
    # a crash's suspects are claimed alone: claimed before, by construction
    suspect = enqueue(driver, "suspect", queue="crashy")
    claim_one(driver, queue="crashy", worker="w9")
    driver.job_release_worker(WorkerExit("w9"))
    assert _first(driver.job_claim_alone(ClaimAlone("crashy", LEASE, "w2"))) == {suspect: False}


def test_the_filtered_the_multi_queue_and_the_fair_claims_say_it_too(driver):
    capped, other = enqueue(driver, "capped", queue="q1"), enqueue(driver, "other", queue="q2")
    [job] = driver.job_claim(Claim(["q1"], 10, LEASE, "w1", caps={"send": 1}))
    assert (job.id, job.first_claim) == (capped, True)
    driver.job_nack(Nack(capped, job.token, "retried", error="boom"))
    assert _first(driver.job_claim(Claim(["q1", "q2"], 10, LEASE, "w1"))) == {capped: False, other: True}
    [fresh] = driver.job_enqueue([new_job("fair")._replace(fair_key="t1")])
    [fair_job] = driver.fair.job_claim_fair(FairClaim("default", 5, LEASE, "w1"))
    assert (fair_job.id, fair_job.first_claim) == (fresh.id, True)
    driver.job_nack(Nack(fair_job.id, fair_job.token, "interrupted", error="drained"))
    assert _first(driver.fair.job_claim_fair(FairClaim("default", 5, LEASE, "w1"))) == {fresh.id: False}
