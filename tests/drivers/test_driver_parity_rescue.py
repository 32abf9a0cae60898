"""Conformance of crash recovery on both drivers: lapsed leases rescued (or dead on the last
attempt), one worker's jobs released, and the jobs of a crashed process judged: split into
halves claimed apart, charged only where a job ran alone, never for leases that lapsed together.
"""

from __future__ import annotations

import pytest

from tests.drivers.parity import LEASE, at, claim, claim_one, enqueue, state
from xjobs.drivers.base import Nack
from xjobs.errors import InvalidOption
from xjobs.drivers.base import ClaimAlone, WorkerExit


# -- rescue and release --------------------------------------------------------------------------


def test_a_lapsed_lease_is_rescued_to_ready(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver, worker="w1", lease=1000)
    clock.advance(1000)
    assert driver.job_rescue() == 0          # expiry is strict: at the instant, still held
    clock.advance(1)
    assert driver.job_rescue() == 1
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.last_error) == ("ready", 1, "lease expired, held by w1")
    assert (at(view.run_at), view.lease_expires_at, view.finished_at) == (clock.now_ms(), None, None)
    assert view.claimed_by == "w1"
    assert [(at(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(clock.now_ms(), 1, "lapsed", "lease expired, held by w1")]


def test_a_lapsed_lease_on_the_last_attempt_is_dead(driver, clock):
    enqueue(driver, "k", max_attempts=1)
    job = claim_one(driver, worker="w1", lease=1000)
    clock.advance(1001)
    assert driver.job_rescue() == 1
    view = driver.job_get(job.id)
    assert (view.state, at(view.finished_at)) == ("dead", clock.now_ms())
    assert view.last_error == "dead: lease expired on the last attempt, held by w1"
    assert [(at(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(clock.now_ms(), 1, "dead", "dead: lease expired on the last attempt, held by w1")]


def test_rescue_is_bounded_by_its_limit_oldest_lease_first(driver, clock):
    for key in "abc":
        enqueue(driver, key)
    a = claim_one(driver, lease=3000)
    b = claim_one(driver, lease=1000)
    c = claim_one(driver, lease=2000)
    clock.advance(5000)
    assert driver.job_rescue(0) == 0
    assert driver.job_rescue(1) == 1
    assert [state(driver, j.id) for j in (a, b, c)] == ["running", "ready", "running"]
    assert driver.job_rescue(1) == 1
    assert [state(driver, j.id) for j in (a, b, c)] == ["running", "ready", "ready"]
    assert driver.job_rescue() == 1


def test_release_worker_returns_only_that_workers_jobs(driver):
    enqueue(driver, "a")
    enqueue(driver, "b", max_attempts=1)
    enqueue(driver, "c")
    a = claim_one(driver, worker="w1")
    b = claim_one(driver, worker="w1")
    c = claim_one(driver, worker="w2")
    released = driver.job_release_worker(WorkerExit("w1", how="killed by SIGKILL"))
    assert [(r.id, r.state, r.outcome) for r in released] == [(a.id, "ready", "quarantined"),
                                                               (b.id, "ready", "quarantined")]
    assert driver.job_release_worker(WorkerExit("w1")) == []
    va, vb = driver.job_get(a.id), driver.job_get(b.id)
    error = "worker process killed by SIGKILL (w1) running 2 job(s); attempt not counted, runs apart from other work next"
    # two jobs ran together: neither is charged, not even b on its last attempt; both are suspects
    assert (va.state, va.last_error, va.attempt, va.crashes) == ("ready", error, 0, 1)
    assert (vb.state, vb.attempt, vb.crashes) == ("ready", 0, 1)
    assert [(h["attempt"], h["outcome"], h["error"]) for h in va.history] == [(1, "quarantined", error)]
    assert state(driver, c.id) == "running"
    assert driver.job_ack(a.id, a.token) is False


def test_a_crash_charges_a_job_that_ran_alone_and_kills_it_on_its_last_attempt(driver):
    enqueue(driver, "a", max_attempts=2)
    job = claim_one(driver, worker="w1")
    [released] = driver.job_release_worker(WorkerExit("w1", how="exited with code 3"))
    assert (released.id, released.state, released.outcome) == (job.id, "ready", "crashed")
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.crashes) == ("ready", 1, 1)
    assert view.last_error == "crashed its worker process (exited with code 3, w1); attempt counted, runs alone next"
    assert claim(driver) == []                         # a suspect: the ordinary claim skips it
    again = driver.job_claim_alone(ClaimAlone("default", LEASE, "w2"))[0]
    assert (again.id, again.attempt) == (job.id, 2)
    [released] = driver.job_release_worker(WorkerExit("w2", how="exited with code 3"))
    assert (released.state, released.outcome) == ("dead", "dead")
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.crashes) == ("dead", 2, 2)
    assert view.last_error == "dead: crashed its worker process on the last attempt (exited with code 3, w2)"
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "crashed"), (2, "dead")]


def test_a_suspect_is_claimed_alone_after_it_waited_and_cleared_once_it_ends_on_its_own(driver, clock):
    for key in "abc":
        enqueue(driver, key)
    a, b = claim(driver, limit=2, worker="w1")
    driver.job_release_worker(WorkerExit("w1"))
    assert [j.id for j in claim(driver)] == [3]        # c: the suspects a and b are skipped
    assert driver.job_claim_alone(ClaimAlone("default", LEASE, "w2", waited_ms=1000)) == []   # not waited yet
    clock.advance(1000)
    got = driver.job_claim_alone(ClaimAlone("default", LEASE, "w2", waited_ms=1000))
    assert [j.id for j in got] == [a.id]               # one at a time, oldest first
    assert driver.job_nack(Nack(a.id, got[0].token, "retried", error="boom")) is True
    assert driver.job_get(a.id).crashes == 0            # it ended on its own: no longer a suspect
    assert [j.id for j in claim(driver)] == [a.id]
    driver.queue_pause("default", True)
    assert driver.job_claim_alone(ClaimAlone("default", LEASE, "w2")) == []   # paused is paused for suspects too
    driver.queue_pause("default", False)
    again = driver.job_claim_alone(ClaimAlone("default", LEASE, "w2"))
    assert [j.id for j in again] == [b.id]
    # an interrupted run (attempt given back) keeps the suspicion
    assert driver.job_nack(Nack(b.id, again[0].token, "interrupted", error="drained")) is True
    assert driver.job_get(b.id).crashes == 1


def _claim_group(driver, worker: str, limit: int = 10) -> list:
    return driver.job_claim_alone(ClaimAlone("default", LEASE, worker, limit=limit))


def _ids(jobs) -> list[int]:
    return [j.id for j in jobs]


def test_a_crashed_processs_jobs_are_split_in_halves_that_run_apart(driver):
    ids = [enqueue(driver, key) for key in "abcde"]
    claim(driver, limit=5, worker="w1")
    driver.job_release_worker(WorkerExit("w1", how="killed by SIGKILL"))
    first = _claim_group(driver, "w2")
    second = _claim_group(driver, "w3")
    assert (_ids(first), _ids(second)) == (ids[:3], ids[3:])     # the odd one in the first half
    assert _claim_group(driver, "w4") == []
    # the first half crashes again: it is halved again; the second ends on its own
    driver.job_release_worker(WorkerExit("w2", how="killed by SIGKILL"))
    for job in second:
        assert driver.job_nack(Nack(job.id, job.token, "retried", error="fine")) is True
        assert driver.job_get(job.id).crashes == 0
    assert _ids(_claim_group(driver, "w5")) == ids[:2] and _ids(_claim_group(driver, "w6")) == ids[2:3]
    assert [driver.job_get(i).crashes for i in ids[:3]] == [2, 2, 2]
    # a half of one is a job alone: its crash is its own
    [released] = driver.job_release_worker(WorkerExit("w6", how="killed by SIGKILL"))
    assert (released.id, released.outcome) == (ids[2], "crashed")


def test_a_group_is_claimed_up_to_the_limit_and_the_rest_stays_for_another_claim(driver):
    ids = [enqueue(driver, key) for key in "abcdefgh"]
    claim(driver, limit=8, worker="w1")
    driver.job_release_worker(WorkerExit("w1", how="killed by SIGKILL"))
    assert _ids(_claim_group(driver, "w2", limit=3)) == ids[:3]
    assert _ids(_claim_group(driver, "w3", limit=3)) == ids[3:4]     # the rest of the first half
    assert _ids(_claim_group(driver, "w4", limit=3)) == ids[4:7]
    assert _claim_group(driver, "w2", limit=0) == []


def test_the_lapsed_jobs_of_one_holder_are_halved_too(driver, clock):
    ids = [enqueue(driver, key) for key in "abcd"]
    claim(driver, limit=4, worker="w1", lease=1000)
    clock.advance(1001)
    assert driver.job_rescue() == 4
    assert _ids(_claim_group(driver, "w2")) == ids[:2] and _ids(_claim_group(driver, "w3")) == ids[2:]


def test_a_release_that_does_not_count_gives_the_attempt_back_and_never_kills(driver):
    enqueue(driver, "last", max_attempts=1)
    job = claim_one(driver, worker="w1")
    [released] = driver.job_release_worker(WorkerExit("w1", crashed=False))
    assert released.outcome == "interrupted"
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.crashes) == ("ready", 0, 0)
    assert view.last_error == "worker stopped by its supervisor, attempt not counted, w1"
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "interrupted")]
    assert driver.job_ack(job.id, job.token) is False


def test_a_silent_or_busy_process_charges_only_as_its_charge_allows(driver):
    for key in "abc":
        enqueue(driver, key)
    a = claim_one(driver, worker="silent")
    [released] = driver.job_release_worker(WorkerExit("silent", how="killed (silent)", charge="suspect"))
    assert (released.outcome, driver.job_get(a.id).attempt) == ("quarantined", 0)   # not yet a suspect
    again = driver.job_claim_alone(ClaimAlone("default", LEASE, "silent-2"))[0]
    [released] = driver.job_release_worker(WorkerExit("silent-2", how="killed (silent)", charge="suspect"))
    assert (released.id, released.outcome, driver.job_get(a.id).attempt) == (again.id, "crashed", 1)
    b = claim_one(driver, worker="busy")
    [released] = driver.job_release_worker(WorkerExit("busy", charge="never"))     # other bodies ran in it
    assert (released.id, released.outcome) == (b.id, "quarantined")
    with pytest.raises(InvalidOption):
        driver.job_release_worker(WorkerExit("w", charge="maybe"))


def test_a_worker_seen_dying_beside_others_never_charges_a_later_lapse(driver, clock):
    for key in "abcd":
        enqueue(driver, key, max_attempts=1)
    a, b, c = claim(driver, limit=3, worker="w1", lease=1000)
    clock.advance(500)
    d = claim_one(driver, worker="w1", lease=1000)           # claimed after the others' renewal
    clock.advance(600)                                       # a, b, c lapse; d still holds
    assert driver.job_rescue() == 3
    assert [driver.job_get(j.id).state for j in (a, b, c)] == ["ready"] * 3
    clock.advance(500)                                       # now d lapses, alone in the table
    assert driver.job_rescue() == 1
    view = driver.job_get(d.id)
    assert (view.state, view.attempt, view.crashes) == ("ready", 0, 1)   # never charged: w1 died beside others
    assert [h["outcome"] for h in view.history] == ["quarantined"]


def test_a_rescue_split_by_its_limit_judges_the_holder_once(driver, clock):
    for key in "ab":
        enqueue(driver, key, max_attempts=1)
    a, b = claim(driver, limit=2, worker="w1", lease=1000)
    clock.advance(1001)
    assert driver.job_rescue(1) == 1 and driver.job_rescue(1) == 1
    assert [driver.job_get(j.id).state for j in (a, b)] == ["ready", "ready"]
    c = enqueue(driver, "c", max_attempts=1)
    claim_one(driver, worker="w1-successor")
    assert [r.outcome for r in driver.job_release_worker(WorkerExit("w1"))] == []   # nothing left to hand back
    assert driver.job_get(c).state == "running"


def test_leases_that_lapse_together_charge_nobody(driver, clock):
    for key in "abc":
        enqueue(driver, key, max_attempts=1)
    a, b = claim(driver, limit=2, worker="w1", lease=1000)
    c = claim_one(driver, worker="w2", lease=1000)
    clock.advance(1001)
    assert driver.job_rescue() == 3
    va, vc = driver.job_get(a.id), driver.job_get(c.id)
    assert (va.state, va.attempt, va.crashes) == ("ready", 0, 1)
    assert va.last_error == "lease expired beside other jobs of w1; attempt not counted, runs apart from other work next"
    assert [h["outcome"] for h in va.history] == ["quarantined"]
    assert (vc.state, vc.crashes) == ("dead", 0)       # c was w2's only job: its lapse is its own
