"""Conformance of durable steps on both drivers: step writes fenced on the claim, sleeps that
park their job (attempt given back) and complete on a later claim, one step per name, the
refusals of bad step and event arguments, retry from a step, and prune. The event bus is in
``test_driver_parity_events.py``.

Every test runs against the memory and the Postgres driver on the shared ManualClock; the
expected values are spelled out, so the parity is that both pass the same assertions.
"""

from __future__ import annotations

import math

import pytest

from tests.drivers.parity import (LEASE, at, claim, enqueue, names, outcome, parked, put, reclaim, run, send,
                                  sleep, step, wait)
from xjobs.drivers.base import Lease, Nack, NewEvent, StepOutcome, StepResult, StepSleep, StepWait
from xjobs.errors import DuplicateJob, InvalidOption, JobNotFound, NotRetryable, StepDuplicate, StepNotFound


# -- step_put and step_list ------------------------------------------------------------------------


def test_step_put_records_a_result_once_and_step_list_reads_it(driver, clock):
    # a job that does not exist (or could not) has no steps
    assert driver.step_list(999).steps == ()
    assert at(driver.step_list(999).now_ms) == clock.now_ms()
    assert driver.step_list(2**70).steps == ()
    job_id, lease = run(driver)
    assert driver.step_list(job_id).steps == ()
    assert at(driver.step_list(job_id).now_ms) == clock.now_ms()
    clock.advance(100)
    assert put(driver, lease, "charge card", {"id": "ch_1", "cents": [1, 2.5]}, attempt=1,
               duration_ms=40) is True
    clock.advance(100)
    assert put(driver, lease, "batch:17", None, duration_ms=0) is True
    # a name already recorded writes nothing: the first result stays
    assert put(driver, lease, "charge card", {"id": "ch_2"}) is False
    log = driver.step_list(job_id)
    assert at(log.now_ms) == clock.now_ms()
    first, second = log.steps
    assert (first.name, first.kind, first.state, first.attempt, first.result) == \
        ("charge card", "run", "completed", 1, {"id": "ch_1", "cents": [1, 2.5]})
    assert (at(first.started_at), at(first.finished_at)) == (clock.now_ms() - 140, clock.now_ms() - 100)
    assert (first.wake_at, first.event, first.event_key, first.timed_out) == (None, None, None, False)
    assert (second.name, second.result, at(second.started_at), at(second.finished_at)) == \
        ("batch:17", None, clock.now_ms(), clock.now_ms())
    assert first.seq < second.seq
    assert driver.job_get(job_id).steps == log.steps
    assert driver.job_get(job_id).state == "running"


def test_steps_are_listed_in_the_order_they_were_first_recorded(driver, clock):
    job_id, lease = run(driver)
    other_id, other = run(driver, "other")
    for name in ["z", "a", "m"]:
        assert put(driver, lease, name, name)
        assert put(driver, other, name + "-other", name)
    assert sleep(driver, lease, "nap", 1000).done is False
    clock.advance(1000)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert sleep(driver, lease, "nap", 1000).done is True      # completing keeps its place
    assert put(driver, lease, "b", "b")
    steps = driver.step_list(job_id).steps
    assert [s.name for s in steps] == ["z", "a", "m", "nap", "b"]
    assert [s.seq for s in steps] == sorted({s.seq for s in steps})
    assert [s.name for s in driver.step_list(other_id).steps] == ["z-other", "a-other", "m-other"]


# -- fences ------------------------------------------------------------------------------------------


def _cancel(driver, clock, job_id, lease):
    driver.job_cancel(job_id)
    return "cancelled"


def _lapse(driver, clock, job_id, lease):
    clock.advance(LEASE + 1)
    assert driver.job_rescue() == 1
    new = reclaim(driver, job_id, worker="w2")          # somebody else runs it now
    assert new.token != lease.token
    return "running"


def _ack(driver, clock, job_id, lease):
    assert driver.job_ack(lease.job_id, lease.token)
    return "completed"


def _suspend(driver, clock, job_id, lease):
    assert sleep(driver, lease, "nap", 60_000).done is False
    return "suspended"


def _nack(driver, clock, job_id, lease):
    assert driver.job_nack(Nack(job_id, lease.token, "retried", error="boom", delay_ms=5000))
    return "ready"


@pytest.mark.parametrize("lose", [_cancel, _lapse, _ack, _suspend, _nack],
                         ids=["cancelled", "lapsed-and-rescued", "acked", "parked", "nacked"])
def test_a_run_that_lost_its_job_writes_no_step(driver, clock, lose):
    job_id, lease = run(driver)
    assert put(driver, lease, "before", 1)
    expected_state = lose(driver, clock, job_id, lease)
    before = driver.step_list(job_id).steps
    assert put(driver, lease, "after", 2) is False
    assert sleep(driver, lease, "late nap", 0) == StepOutcome(False, fenced=True)
    assert sleep(driver, lease, "late nap 2", 10_000) == StepOutcome(False, fenced=True)
    send(driver, "paid", "o1", {"ok": True})
    assert wait(driver, lease, "late wait") == StepOutcome(False, fenced=True)
    assert wait(driver, lease, "late wait 2", key="nothing", timeout_ms=10) == StepOutcome(False, fenced=True)
    assert driver.step_list(job_id).steps == before
    assert "after" not in [s.name for s in before]
    assert driver.job_get(job_id).state == expected_state


def test_a_wrong_token_writes_no_step_and_leaves_the_job_running(driver):
    job_id, lease = run(driver)
    send(driver, "paid", "o1", 1)
    wrong = {"other": lease.token + 1, "negated": -lease.token, "too-big": 2**63, "none": None,
             "text": str(lease.token)}
    for label, token in wrong.items():
        bad = Lease(job_id, token)  # type: ignore[arg-type]
        assert put(driver, bad, "a") is False, label
        assert sleep(driver, bad, "b", 0) == StepOutcome(False, fenced=True), label
        assert wait(driver, bad, "c") == StepOutcome(False, fenced=True), label
    assert put(driver, Lease(job_id + 100, lease.token), "a") is False
    assert driver.step_list(job_id).steps == ()
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.history) == ("running", 1, ())
    assert put(driver, lease, "a") is True     # the real claim still writes


# -- sleep -------------------------------------------------------------------------------------------


def test_a_sleep_parks_the_job_and_completes_on_the_claim_after_it_is_due(driver, clock):
    job_id, lease = run(driver, max_attempts=1)
    t0 = clock.now_ms()
    assert put(driver, lease, "a", "A")
    assert outcome(sleep(driver, lease, "s", 5000)) == (False, None, t0 + 5000, False, False)
    view = driver.job_get(job_id)
    # suspended until the wake-up, the attempt given back, no error, the lease let go
    assert parked(view) == ("suspended", 0, t0 + 5000, None, None)
    assert [(at(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(t0, 1, "suspended", None)]
    s = step(driver, job_id, "s")
    assert (s.kind, s.state, s.attempt, at(s.started_at), s.finished_at, at(s.wake_at), s.result) == \
        ("sleep", "sleeping", 1, t0, None, t0 + 5000, None)
    assert claim(driver) == []
    clock.advance(4999)
    assert driver.job_wake() == 0
    assert claim(driver) == []
    clock.advance(1)
    assert driver.job_wake() == 1
    assert driver.job_get(job_id).state == "ready"
    [again] = claim(driver)
    assert again.attempt == 1                 # a sleep burns no attempt: still the first
    lease = Lease(job_id, again.token)
    assert put(driver, lease, "a", "other") is False        # replayed, not written again
    assert outcome(sleep(driver, lease, "s", 5000)) == (True, None, t0 + 5000, False, False)
    s = step(driver, job_id, "s")
    assert (s.state, at(s.finished_at), at(s.wake_at)) == ("completed", t0 + 5000, t0 + 5000)
    assert outcome(sleep(driver, lease, "s", 5000)) == (True, None, t0 + 5000, False, False)
    assert driver.job_ack(job_id, lease.token)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("completed", 1, None)
    assert names(driver, job_id) == [("a", "run", "completed"), ("s", "sleep", "completed")]


def test_a_sleep_keeps_the_wake_up_time_it_recorded_first(driver, clock):
    job_id, lease = run(driver)
    t0 = clock.now_ms()
    assert sleep(driver, lease, "s", 1000).wake_at == t0 + 1000
    clock.advance(1000)
    assert driver.job_rescue() == 1           # rescue wakes due suspensions too
    lease = reclaim(driver, job_id)
    # a later attempt asking for longer does not move the recorded time: done now
    assert outcome(sleep(driver, lease, "s", 60_000, attempt=2)) == (True, None, t0 + 1000, False, False)
    assert step(driver, job_id, "s").attempt == 2


def test_a_sleep_not_yet_due_parks_again_until_the_same_time(driver, clock):
    job_id, lease = run(driver)
    t0 = clock.now_ms()
    assert wait(driver, lease, "w", poll_ms=200).wake_at == t0 + 200
    clock.advance(200)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert sleep(driver, lease, "s", 1000).wake_at == t0 + 1200
    # an event for the earlier (still waiting) step wakes the job before the sleep is due
    assert send(driver).woken == 1
    lease = reclaim(driver, job_id)
    assert outcome(wait(driver, lease, "w", poll_ms=200)) == (True, None, None, False, False)
    assert outcome(sleep(driver, lease, "s", 1000)) == (False, None, t0 + 1200, False, False)
    view = driver.job_get(job_id)
    assert parked(view) == ("suspended", 0, t0 + 1200, None, None)
    assert [h["outcome"] for h in view.history] == ["suspended", "suspended", "suspended"]


def test_a_zero_sleep_and_a_zero_timeout_complete_at_once(driver, clock):
    job_id, lease = run(driver)
    assert outcome(sleep(driver, lease, "s", 0)) == (True, None, clock.now_ms(), False, False)
    assert outcome(wait(driver, lease, "w", timeout_ms=0)) == (True, None, clock.now_ms(), True, False)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.history) == ("running", 1, ())
    assert names(driver, job_id) == [("s", "sleep", "completed"), ("w", "wait", "completed")]


def test_job_wake_takes_due_suspensions_in_run_at_order_up_to_its_limit(driver, clock):
    late_id, late = run(driver, "late")
    early_id, early = run(driver, "early")
    never_id, never = run(driver, "never")
    sleep(driver, late, "s", 2000)
    sleep(driver, early, "s", 1000)
    sleep(driver, never, "s", 10_000)
    clock.advance(2000)
    assert driver.job_wake(1) == 1
    assert [driver.job_get(i).state for i in (late_id, early_id, never_id)] == \
        ["suspended", "ready", "suspended"]
    assert driver.job_wake(0) == 0
    assert driver.job_wake() == 1
    assert driver.job_wake() == 0
    assert driver.job_get(never_id).state == "suspended"


# -- kind mismatch -----------------------------------------------------------------------------------


def test_a_step_name_means_one_step(driver, clock):
    job_id, lease = run(driver)
    assert put(driver, lease, "r", 1)
    with pytest.raises(StepDuplicate) as err:
        sleep(driver, lease, "r", 0)
    assert err.value.code == "X_STEP_DUPLICATE"
    with pytest.raises(StepDuplicate):
        wait(driver, lease, "r")
    assert sleep(driver, lease, "s", 500).done is False
    clock.advance(500)
    driver.job_wake()
    lease = reclaim(driver, job_id)
    with pytest.raises(StepDuplicate):
        wait(driver, lease, "s", timeout_ms=0)
    assert put(driver, lease, "s", "run now") is False
    assert send(driver, "paid", "k1", 1).woken == 0
    assert wait(driver, lease, "w", "paid", "k1").value == 1
    with pytest.raises(StepDuplicate):
        wait(driver, lease, "w", "paid", "k2")
    with pytest.raises(StepDuplicate):
        wait(driver, lease, "w", "refunded", "k1")
    with pytest.raises(StepDuplicate):
        sleep(driver, lease, "w", 0)
    # nothing was written, the job still runs under its claim
    assert names(driver, job_id) == [("r", "run", "completed"), ("s", "sleep", "sleeping"),
                                     ("w", "wait", "completed")]
    assert step(driver, job_id, "w").event_key == "k1"
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("running", 1)
    assert sleep(driver, lease, "s", 500).done is True


# -- refusals ----------------------------------------------------------------------------------------


# every refusal is the facade's, once for every driver: one test walks them all (a schema
# per case would cost more than the cases)
REFUSED = [
    ("sleep-nan", lambda d, lease: d.step_sleep(lease, StepSleep("s", math.nan, 1))),
    ("sleep-inf", lambda d, lease: d.step_sleep(lease, StepSleep("s", math.inf, 1))),
    ("sleep-negative", lambda d, lease: d.step_sleep(lease, StepSleep("s", -1, 1))),
    ("sleep-too-long", lambda d, lease: d.step_sleep(lease, StepSleep("s", 11 * 365 * 86_400_000.0, 1))),
    ("sleep-no-name", lambda d, lease: d.step_sleep(lease, StepSleep("", 10, 1))),
    ("sleep-newline", lambda d, lease: d.step_sleep(lease, StepSleep("a\nb", 10, 1))),
    ("sleep-long-name", lambda d, lease: d.step_sleep(lease, StepSleep("x" * 257, 10, 1))),
    ("sleep-negative-attempt", lambda d, lease: d.step_sleep(lease, StepSleep("s", 10, -1))),
    ("put-no-name", lambda d, lease: d.step_put(lease, StepResult("", b"1", 1, 0))),
    ("put-nul", lambda d, lease: d.step_put(lease, StepResult("a\x00", b"1", 1, 0))),
    ("put-del", lambda d, lease: d.step_put(lease, StepResult("a\x7f", b"1", 1, 0))),
    ("put-none-name", lambda d, lease: d.step_put(lease, StepResult(None, b"1", 1, 0))),  # type: ignore[arg-type]
    ("put-text-result", lambda d, lease: d.step_put(lease, StepResult("r", "1", 1, 0))),  # type: ignore[arg-type]
    ("put-nan-duration", lambda d, lease: d.step_put(lease, StepResult("r", b"1", 1, math.nan))),
    ("put-fraction-attempt", lambda d, lease: d.step_put(lease, StepResult("r", b"1", 1.5, 0))),  # type: ignore[arg-type]
    ("wait-no-event", lambda d, lease: d.step_wait(lease, StepWait("w", "", "k", None, None, 1))),
    ("wait-tab-event", lambda d, lease: d.step_wait(lease, StepWait("w", "e\t", "k", None, None, 1))),
    ("wait-nul-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k\x00", None, None, 1))),
    ("wait-none-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", None, None, None, 1))),  # type: ignore[arg-type]
    ("wait-long-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k" * 1025, None, None, 1))),
    ("wait-nan-timeout", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", math.nan, None, 1))),
    ("wait-negative-timeout", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", -5, None, 1))),
    ("wait-zero-poll", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", None, 0, 1))),
    ("wait-inf-poll", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", None, math.inf, 1))),
    ("send-no-name", lambda d, lease: d.event_send(NewEvent("", "k", b"1"))),
    ("send-nul-key", lambda d, lease: d.event_send(NewEvent("e", "k\x00", b"1"))),
    ("send-long-name", lambda d, lease: d.event_send(NewEvent("e" * 257, "k", b"1"))),
    ("send-decoded-payload", lambda d, lease: d.event_send(NewEvent("e", "k", {"a": 1}))),  # type: ignore[arg-type]
    ("prune-nan", lambda d, lease: d.event_prune(math.nan, 10)),
    ("prune-negative", lambda d, lease: d.event_prune(-1, 10)),
    ("prune-negative-limit", lambda d, lease: d.event_prune(0, -1)),
    ("prune-fraction-limit", lambda d, lease: d.event_prune(0, 2.5)),
    ("reopen-no-name", lambda d, lease: d.step_reopen(lease.job_id, "")),
    ("reopen-newline", lambda d, lease: d.step_reopen(lease.job_id, "a\nb")),
    ("wake-negative", lambda d, lease: d.job_wake(-1)),
    ("wake-nan", lambda d, lease: d.job_wake(math.nan)),
]


def test_bad_step_and_event_arguments_are_refused_and_write_nothing(driver, clock):
    job_id, lease = run(driver)
    send(driver, "e", "k", 1)
    for label, call in REFUSED:
        try:
            call(driver, lease)
        except InvalidOption as err:
            assert err.code == "X_INVALID_OPTION", label
        else:
            pytest.fail(f"{label}: not refused")
    assert driver.step_list(job_id).steps == ()
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.history) == ("running", 1, ())
    # the one event stored before is still the first one, and the only one
    assert wait(driver, lease, "check", "e", "k").value == 1
    clock.advance(1)
    assert driver.event_prune(0, 100) == 1


def test_names_at_their_limits_are_accepted(driver):
    job_id, lease = run(driver)
    assert put(driver, lease, "x" * 256, 1)
    assert put(driver, lease, "ünï cödé: 17 ✓", 2)
    assert send(driver, "e" * 256, "k" * 1024, 3).woken == 0
    assert wait(driver, lease, "w", "e" * 256, "k" * 1024).value == 3
    assert [s.name for s in driver.step_list(job_id).steps] == ["x" * 256, "ünï cödé: 17 ✓", "w"]


# -- retry from a step -------------------------------------------------------------------------------


def _finished(driver, clock, finish: str) -> tuple[int, Lease]:
    """A job that recorded a (run), b (sleep), c (wait), d (run), then finished as ``finish``."""
    job_id, lease = run(driver)
    assert put(driver, lease, "a", "A")
    assert sleep(driver, lease, "b", 0).done
    send(driver, "paid", "o1", "C")
    assert wait(driver, lease, "c").value == "C"
    assert put(driver, lease, "d", "D")
    clock.advance(100)
    if finish == "completed":
        assert driver.job_ack(job_id, lease.token)
    elif finish == "dead":
        assert driver.job_nack(Nack(job_id, lease.token, "dead", error="boom"))
    else:
        driver.job_cancel(job_id, "stop")
    assert driver.job_get(job_id).state == finish
    return job_id, lease


@pytest.mark.parametrize("finish", ["completed", "dead", "cancelled"])
def test_step_reopen_forgets_the_step_and_every_later_one(driver, clock, finish):
    job_id, _ = _finished(driver, clock, finish)
    kept = driver.step_list(job_id).steps[:2]
    clock.advance(50)
    view = driver.step_reopen(job_id, "c")
    assert (view.state, view.attempt, at(view.run_at), view.finished_at, view.lease_expires_at) == \
        ("ready", 0, clock.now_ms(), None, None)
    assert view.steps == kept
    last = view.history[-1]
    assert (at(last["at"]), last["attempt"], last["outcome"], last["error"]) == \
        (clock.now_ms(), 0, "requeued", "from step c")
    assert driver.job_get(job_id).steps == kept
    [again] = claim(driver)
    assert (again.id, again.attempt) == (job_id, 1)
    lease = Lease(job_id, again.token)
    assert put(driver, lease, "a", "other") is False          # kept: replayed
    assert sleep(driver, lease, "b", 0).done is True
    assert put(driver, lease, "c", "now a run") is True        # forgotten: free again
    assert put(driver, lease, "d", "D2") is True
    assert names(driver, job_id) == [("a", "run", "completed"), ("b", "sleep", "completed"),
                                     ("c", "run", "completed"), ("d", "run", "completed")]
    assert step(driver, job_id, "d").result == "D2"


def test_step_reopen_from_the_first_step_forgets_them_all(driver, clock):
    job_id, _ = _finished(driver, clock, "completed")
    assert driver.step_reopen(job_id, "a").steps == ()
    assert driver.step_list(job_id).steps == ()


def test_step_reopen_refusals_change_nothing(driver, clock):
    job_id, _ = _finished(driver, clock, "completed")
    steps, history = driver.step_list(job_id).steps, driver.job_get(job_id).history
    with pytest.raises(StepNotFound) as err:
        driver.step_reopen(job_id, "never")
    assert err.value.code == "X_STEP_NOT_FOUND"
    with pytest.raises(JobNotFound):
        driver.step_reopen(999, "a")
    with pytest.raises(JobNotFound):
        driver.step_reopen(2**70, "a")
    # a live job now holds the key: the finished one cannot run again beside it
    holder = enqueue(driver, "k")
    with pytest.raises(DuplicateJob):
        driver.step_reopen(job_id, "b")
    view = driver.job_get(job_id)
    assert (view.state, view.steps, view.history) == ("completed", steps, history)
    # a live job is not retried from a step (a step it never recorded: not found first)
    live = reclaim(driver, holder)
    assert put(driver, live, "a", 1)

    def refused_while_live():
        with pytest.raises(NotRetryable) as err:
            driver.step_reopen(holder, "a")
        assert err.value.code == "X_JOB_NOT_RETRYABLE"
        with pytest.raises(StepNotFound):
            driver.step_reopen(holder, "b")

    refused_while_live()                                      # running
    assert sleep(driver, live, "nap", 1000).done is False
    refused_while_live()                                      # suspended
    clock.advance(1000)
    assert driver.job_wake() == 1
    refused_while_live()                                      # ready
    assert names(driver, holder) == [("a", "run", "completed"), ("nap", "sleep", "sleeping")]
    driver.job_cancel(holder)
    assert driver.step_reopen(job_id, "b").state == "ready"


# -- prune -------------------------------------------------------------------------------------------


def test_job_prune_deletes_the_steps_of_the_jobs_it_prunes(driver, clock):
    done_id, _ = _finished(driver, clock, "completed")
    live_id, live = run(driver, "live")
    assert put(driver, live, "x", 1)
    clock.advance(1000)
    assert driver.job_prune(500, 500) == 1
    assert driver.step_list(done_id).steps == ()
    with pytest.raises(JobNotFound):
        driver.job_get(done_id)
    assert names(driver, live_id) == [("x", "run", "completed")]
    with pytest.raises(JobNotFound):
        driver.step_reopen(done_id, "a")
