"""Conformance of durable steps and the event bus on both drivers: step writes fenced on the
claim, sleeps and waits that park their job (attempt given back) and complete on a later
claim, events that wake parked waiters and are never consumed, retry from a step, prune.

Every test runs against the memory and the Postgres driver on the shared ManualClock; the
expected values are spelled out, so the parity is that both pass the same assertions.
"""

from __future__ import annotations

import math

import orjson
import pytest

from xjobs.drivers.base import (LATEST_MS, Lease, Nack, NewEvent, StepOutcome, StepResult, StepSleep,
                                StepWait)
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.sql import statements
from xjobs.errors import (DuplicateJob, InvalidOption, JobNotFound, LeaseLost, NotRetryable,
                          StepDuplicate, StepNotFound)

from .test_driver_parity import LEASE, at, claim, enqueue, new_job


def run(driver, key: str = "k", queue: str = "default", **kw) -> tuple[int, Lease]:
    """Enqueue one job and claim it: its id and the claim's lease."""
    job_id = enqueue(driver, key, queue=queue, **kw)
    [job] = [j for j in claim(driver, queue) if j.id == job_id]
    return job_id, Lease(job.id, job.token)


def reclaim(driver, job_id: int, **kw) -> Lease:
    [job] = [j for j in claim(driver, **kw) if j.id == job_id]
    return Lease(job.id, job.token)


def put(driver, lease: Lease, name: str, value: object = None, attempt: int = 1,
        duration_ms: float = 0.0) -> bool:
    return driver.step_put(lease, StepResult(name, orjson.dumps(value), attempt, duration_ms))


def sleep(driver, lease: Lease, name: str, duration_ms: float, attempt: int = 1) -> StepOutcome:
    return driver.step_sleep(lease, StepSleep(name, duration_ms, attempt))


def wait(driver, lease: Lease, name: str, event: str = "paid", key: str = "o1", *,
         timeout_ms: float | None = None, poll_ms: float | None = None, attempt: int = 1) -> StepOutcome:
    return driver.step_wait(lease, StepWait(name, event, key, timeout_ms, poll_ms, attempt))


def send(driver, name: str = "paid", key: str = "o1", payload: object = None, conn=None):
    return driver.event_send(NewEvent(name, key, orjson.dumps(payload)), conn=conn)


def names(driver, job_id: int) -> list[tuple[str, str, str]]:
    return [(s.name, s.kind, s.state) for s in driver.step_list(job_id).steps]


def step(driver, job_id: int, name: str):
    [found] = [s for s in driver.step_list(job_id).steps if s.name == name]
    return found


def outcome(result: StepOutcome) -> tuple:
    """A StepOutcome with its time compared to the microsecond."""
    return (result.done, result.value, at(result.wake_at), result.timed_out, result.fenced)


def parked(view) -> tuple:
    return (view.state, view.attempt, at(view.run_at), view.last_error, view.lease_expires_at)


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


def _park(driver, clock, job_id, lease):
    assert sleep(driver, lease, "nap", 60_000).done is False
    return "suspended"


def _nack(driver, clock, job_id, lease):
    assert driver.job_nack(Nack(job_id, lease.token, "boom", delay_ms=5000))
    return "ready"


@pytest.mark.parametrize("lose", [_cancel, _lapse, _ack, _park, _nack],
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
        bad = Lease(job_id, token)
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


# -- wait and send -----------------------------------------------------------------------------------


def test_a_wait_completes_with_an_event_sent_before_it(driver, clock):
    sent = send(driver, "paid", "o1", {"amount": 5})
    assert (sent.woken, isinstance(sent.id, int)) == (0, True)
    job_id, lease = run(driver)
    clock.advance(10)
    assert outcome(wait(driver, lease, "w", timeout_ms=1000)) == \
        (True, {"amount": 5}, clock.now_ms() + 1000, False, False)
    w = step(driver, job_id, "w")
    assert (w.kind, w.state, w.result, w.event, w.event_key, w.timed_out) == \
        ("wait", "completed", {"amount": 5}, "paid", "o1", False)
    assert (at(w.started_at), at(w.finished_at)) == (clock.now_ms(), clock.now_ms())
    view = driver.job_get(job_id)
    assert (view.state, view.history) == ("running", ())


def test_a_wait_parks_until_its_event_and_keys_are_exact(driver, clock):
    job_id, lease = run(driver, max_attempts=1)
    assert outcome(wait(driver, lease, "w", "paid", "o1")) == (False, None, LATEST_MS, False, False)
    assert parked(driver.job_get(job_id)) == ("suspended", 0, LATEST_MS, None, None)
    w = step(driver, job_id, "w")
    assert (w.state, w.wake_at, w.event, w.event_key, w.finished_at) == ("waiting", None, "paid", "o1", None)
    clock.advance(86_400_000)
    assert driver.job_wake() == 0             # no timeout: only the event wakes it
    assert send(driver, "paid", "o2", 1).woken == 0
    assert send(driver, "paid", "O1", 1).woken == 0
    assert send(driver, "paid", "o1 ", 1).woken == 0
    assert send(driver, "refunded", "o1", 1).woken == 0
    assert driver.job_get(job_id).state == "suspended"
    sent = send(driver, "paid", "o1", {"ok": 1})
    assert sent.woken == 1
    view = driver.job_get(job_id)
    assert (view.state, at(view.run_at), view.attempt) == ("ready", clock.now_ms(), 0)
    [again] = claim(driver)
    assert again.attempt == 1
    lease = Lease(job_id, again.token)
    assert outcome(wait(driver, lease, "w", "paid", "o1")) == (True, {"ok": 1}, None, False, False)
    w = step(driver, job_id, "w")
    assert (w.state, w.result, at(w.finished_at), w.timed_out) == ("completed", {"ok": 1}, clock.now_ms(), False)
    assert send(driver, "paid", "o1", 2).woken == 0       # nothing waits any more
    assert outcome(wait(driver, lease, "w", "paid", "o1")) == (True, {"ok": 1}, None, False, False)
    assert driver.job_ack(job_id, lease.token)


def test_the_first_event_is_delivered_to_every_waiter_and_none_is_consumed(driver):
    first_id, first = run(driver, "first")
    second_id, second = run(driver, "second")
    assert wait(driver, first, "w", "shipped", "").done is False
    assert wait(driver, second, "other name", "shipped", "").done is False
    one = send(driver, "shipped", "", [1])
    two = send(driver, "shipped", "", [2])
    assert (one.woken, two.woken) == (2, 0)
    assert two.id > one.id
    leases = {j.id: Lease(j.id, j.token) for j in claim(driver)}
    assert sorted(leases) == [first_id, second_id]
    assert wait(driver, leases[first_id], "w", "shipped", "").value == [1]
    assert wait(driver, leases[second_id], "other name", "shipped", "").value == [1]
    _, late = run(driver, "late")
    assert wait(driver, late, "w", "shipped", "").value == [1]


def test_a_wait_times_out_once_its_timeout_has_passed(driver, clock):
    job_id, lease = run(driver)
    t0 = clock.now_ms()
    assert outcome(wait(driver, lease, "w", timeout_ms=2000)) == (False, None, t0 + 2000, False, False)
    assert parked(driver.job_get(job_id)) == ("suspended", 0, t0 + 2000, None, None)
    assert at(step(driver, job_id, "w").wake_at) == t0 + 2000
    clock.advance(1999)
    assert driver.job_wake() == 0
    clock.advance(1)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert outcome(wait(driver, lease, "w", timeout_ms=2000)) == (True, None, t0 + 2000, True, False)
    w = step(driver, job_id, "w")
    assert (w.state, w.result, w.timed_out, at(w.finished_at)) == ("completed", None, True, t0 + 2000)
    # an event sent after the timeout changes nothing: the step answers as it was recorded
    assert send(driver, "paid", "o1", "late").woken == 0
    assert outcome(wait(driver, lease, "w", timeout_ms=2000)) == (True, None, t0 + 2000, True, False)


def test_a_poll_parks_no_longer_than_the_poll_and_the_timeout_counts_from_the_first_call(driver, clock):
    job_id, lease = run(driver)
    t0 = clock.now_ms()
    assert outcome(wait(driver, lease, "w", timeout_ms=2500, poll_ms=1000)) == \
        (False, None, t0 + 1000, False, False)
    assert at(driver.job_get(job_id).run_at) == t0 + 1000
    assert at(step(driver, job_id, "w").wake_at) == t0 + 2500
    clock.advance(1000)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert outcome(wait(driver, lease, "w", timeout_ms=2500, poll_ms=1000)) == \
        (False, None, t0 + 2000, False, False)
    clock.advance(1000)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    # the timeout (t0 + 2500) comes before the next poll (t0 + 3000)
    assert outcome(wait(driver, lease, "w", timeout_ms=2500, poll_ms=1000)) == \
        (False, None, t0 + 2500, False, False)
    clock.advance(500)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert outcome(wait(driver, lease, "w", timeout_ms=2500, poll_ms=1000)) == \
        (True, None, t0 + 2500, True, False)
    view = driver.job_get(job_id)
    assert (view.attempt, [h["outcome"] for h in view.history]) == (1, ["suspended"] * 3)


def test_a_poll_without_a_timeout_parks_for_the_poll(driver, clock):
    job_id, lease = run(driver)
    t0 = clock.now_ms()
    assert outcome(wait(driver, lease, "w", poll_ms=300)) == (False, None, t0 + 300, False, False)
    assert at(driver.job_get(job_id).run_at) == t0 + 300
    assert step(driver, job_id, "w").wake_at is None


def test_an_event_sent_while_its_waiter_runs_wakes_nobody_and_is_found(driver, clock):
    job_id, lease = run(driver)
    assert wait(driver, lease, "w", poll_ms=100).done is False
    clock.advance(100)
    assert driver.job_wake() == 1
    lease = reclaim(driver, job_id)
    assert step(driver, job_id, "w").state == "waiting"
    assert send(driver, "paid", "o1", "now").woken == 0    # running: nothing to wake
    assert driver.job_get(job_id).state == "running"
    assert wait(driver, lease, "w", poll_ms=100).value == "now"


def test_an_event_wakes_no_cancelled_waiter(driver):
    job_id, lease = run(driver)
    assert wait(driver, lease, "w").done is False
    driver.job_cancel(job_id)
    assert send(driver).woken == 0
    assert driver.job_get(job_id).state == "cancelled"
    assert step(driver, job_id, "w").state == "waiting"


# -- event prune -------------------------------------------------------------------------------------


def test_event_prune_forgets_events_past_retention_oldest_first(driver, clock):
    job_id, lease = run(driver)    # a wait takes the events sent since its job was enqueued
    for key in ["k0", "k1", "k2"]:
        send(driver, "e", key, key)
        clock.advance(1000)
    # now = t0 + 3000; sent at t0, t0 + 1000, t0 + 2000
    assert wait(driver, lease, "kept", "e", "k0").value == "k0"
    assert driver.event_prune(1500, 1) == 1       # k0 first
    assert driver.event_prune(2000, 10) == 0      # k1 was sent exactly 2000 ago: kept
    assert driver.event_prune(1500, 10) == 1      # k1
    assert driver.event_prune(1500, 0) == 0
    assert wait(driver, lease, "k2", "e", "k2").value == "k2"
    assert wait(driver, lease, "kept", "e", "k0").value == "k0"   # recorded: replayed as it was
    assert outcome(wait(driver, lease, "k1", "e", "k1", timeout_ms=0)) == \
        (True, None, clock.now_ms(), True, False)
    assert driver.event_prune(0, 10) == 1
    assert driver.event_prune(0, 10) == 0


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
    ("put-none-name", lambda d, lease: d.step_put(lease, StepResult(None, b"1", 1, 0))),
    ("put-text-result", lambda d, lease: d.step_put(lease, StepResult("r", "1", 1, 0))),
    ("put-nan-duration", lambda d, lease: d.step_put(lease, StepResult("r", b"1", 1, math.nan))),
    ("put-fraction-attempt", lambda d, lease: d.step_put(lease, StepResult("r", b"1", 1.5, 0))),
    ("wait-no-event", lambda d, lease: d.step_wait(lease, StepWait("w", "", "k", None, None, 1))),
    ("wait-tab-event", lambda d, lease: d.step_wait(lease, StepWait("w", "e\t", "k", None, None, 1))),
    ("wait-nul-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k\x00", None, None, 1))),
    ("wait-none-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", None, None, None, 1))),
    ("wait-long-key", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k" * 1025, None, None, 1))),
    ("wait-nan-timeout", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", math.nan, None, 1))),
    ("wait-negative-timeout", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", -5, None, 1))),
    ("wait-zero-poll", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", None, 0, 1))),
    ("wait-inf-poll", lambda d, lease: d.step_wait(lease, StepWait("w", "e", "k", None, math.inf, 1))),
    ("send-no-name", lambda d, lease: d.event_send(NewEvent("", "k", b"1"))),
    ("send-nul-key", lambda d, lease: d.event_send(NewEvent("e", "k\x00", b"1"))),
    ("send-long-name", lambda d, lease: d.event_send(NewEvent("e" * 257, "k", b"1"))),
    ("send-decoded-payload", lambda d, lease: d.event_send(NewEvent("e", "k", {"a": 1}))),
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
        assert driver.job_nack(Nack(job_id, lease.token, "boom", dead=True, outcome="dead"))
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


# -- events in a transaction -------------------------------------------------------------------------


class _Abort(Exception):
    pass


def _parked_waiter(driver, key: str = "waiter") -> int:
    job_id, lease = run(driver, key)
    assert wait(driver, lease, "w").done is False
    return job_id


def test_an_event_sent_in_a_rolled_back_job_transaction_is_never_delivered(driver):
    waiter = _parked_waiter(driver)
    sender_id, sender = run(driver, "sender")
    with pytest.raises(_Abort):
        with driver.job_transaction(sender) as conn:
            assert send(driver, "paid", "o1", "lost", conn=conn).woken == 1
            raise _Abort
    assert driver.job_get(sender_id).state == "running"
    assert wait(driver, sender, "check", timeout_ms=0).timed_out is True    # never stored
    assert driver.job_get(waiter).state == "suspended"      # and its wake-up rolled back too


def test_an_event_sent_in_a_job_transaction_that_lost_its_lease_is_never_delivered(driver):
    waiter = _parked_waiter(driver)
    sender_id, sender = run(driver, "sender")
    with pytest.raises(LeaseLost):
        with driver.job_transaction(sender) as conn:
            send(driver, "paid", "o1", "lost", conn=conn)
            driver.job_cancel(sender_id)
    _, probe = run(driver, "probe", queue="probes")      # leaves the default queue alone
    assert wait(driver, probe, "check", timeout_ms=0).timed_out is True     # never stored
    assert driver.job_get(waiter).state == "suspended"


def test_an_event_sent_in_a_committed_job_transaction_wakes_its_waiter(driver):
    waiter = _parked_waiter(driver)
    sender_id, sender = run(driver, "sender")
    with driver.job_transaction(sender) as conn:
        assert send(driver, "paid", "o1", "kept", conn=conn).woken == 1
    assert driver.job_get(sender_id).state == "completed"
    assert driver.job_get(waiter).state == "ready"
    lease = reclaim(driver, waiter)
    assert wait(driver, lease, "w").value == "kept"


def test_the_memory_driver_refuses_a_foreign_connection_for_an_event(memory_driver):
    """As ``job_enqueue`` does: a send joins only a transaction of this driver's own."""
    with pytest.raises(InvalidOption):
        memory_driver.event_send(NewEvent("paid", "o1", b'"mine"'), conn=object())
    other = MemoryDriver(clock=memory_driver.clock)
    assert other.event_send(NewEvent("paid", "o1", b'"theirs"')).id == 1
    other.job_enqueue([new_job("k")])
    job = other.job_claim(["default"], 1, LEASE, "w1")[0]
    with pytest.raises(_Abort):
        with other.job_transaction(Lease(job.id, job.token)) as conn:
            with pytest.raises(InvalidOption):
                memory_driver.event_send(NewEvent("paid", "o1", b'"mine"'), conn=conn)
            raise _Abort
    # the other driver's rollback forgot none of its own events
    assert other.step_wait(Lease(job.id, job.token), StepWait("w", "paid", "o1", None, None, 1)).value == "theirs"


# -- Postgres only -----------------------------------------------------------------------------------


@pytest.mark.postgres
def test_event_send_joins_the_callers_transaction(pg_driver):
    waiter = _parked_waiter(pg_driver)
    with pg_driver.connect() as conn:
        with pytest.raises(_Abort):
            with conn.transaction():
                assert send(pg_driver, "paid", "o1", "lost", conn=conn).woken == 1
                raise _Abort
        assert pg_driver.job_get(waiter).state == "suspended"
        count = conn.execute(f"select count(*) from {pg_driver.schema}.events").fetchone()[0]
        assert count == 0
        with conn.transaction():
            sent = send(pg_driver, "paid", "o1", "kept", conn=conn)
            assert sent.woken == 1
            # not committed yet: nobody else sees the wake-up
            assert pg_driver.job_get(waiter).state == "suspended"
        assert pg_driver.job_get(waiter).state == "ready"
    lease = reclaim(pg_driver, waiter)
    assert wait(pg_driver, lease, "w").value == "kept"


def _plan_nodes(node: dict) -> list[dict]:
    return [node] + [n for child in node.get("Plans", ()) for n in _plan_nodes(child)]


@pytest.mark.postgres
def test_a_wait_finds_its_event_with_one_index_probe(pg_driver):
    schema = pg_driver.schema
    with pg_driver.connect() as conn:
        conn.execute(f"insert into {schema}.events (name, key, payload, sent_at) "
                     "select 'e' || (i % 50), 'k' || i, '{}'::jsonb, now() - interval '1 hour' "
                     "from generate_series(1, 10000) as i")
        conn.execute(f"analyze {schema}.events")
        for server_clock in (True, False):
            sql = statements(schema, server_clock)["event_first"]
            [[plan]] = conn.execute("explain (format json) " + sql,
                                    {"name": "paid", "key": "o1", "id": 1, "now": 0.0}).fetchone()
            nodes = _plan_nodes(plan["Plan"])
            scans = sorted((n["Node Type"], n.get("Index Name")) for n in nodes if "Scan" in n["Node Type"])
            # the event: one probe of its index; the job's creation time: one primary-key lookup
            assert scans == [("Index Scan", "events_lookup_idx"), ("Index Scan", "jobs_pkey")], plan
            assert not any(n["Node Type"] == "Sort" for n in nodes), plan
    _, lease = run(pg_driver)
    send(pg_driver, "e7", "k7", "later")
    # (e7, k7) was stored an hour before the job existed: the wait takes the one sent since
    assert wait(pg_driver, lease, "w", "e7", "k7").value == "later"


def test_a_parked_job_is_counted_suspended_and_never_in_the_depth(driver, clock):
    job_id, lease = run(driver)
    assert not sleep(driver, lease, "nap", 60_000).done
    clock.advance(1)
    assert driver.queue_summary().get("default") is None or driver.queue_summary()["default"].depth == 0
    assert driver.queue_counts()["default"].get("suspended") == 1
    assert driver.queue_counts()["default"].get("ready", 0) == 0


@pytest.mark.postgres
def test_a_send_on_an_autocommit_connection_holds_its_lock_until_it_committed(pg_driver):
    waiter = _parked_waiter(pg_driver)
    with pg_driver.connect() as conn:          # autocommit: the send makes its own transaction
        assert send(pg_driver, "paid", "o1", "auto", conn=conn).woken == 1
        assert not conn.info.transaction_status   # idle: nothing left open on the caller's side
    assert pg_driver.job_get(waiter).state == "ready"
    assert wait(pg_driver, reclaim(pg_driver, waiter), "w").value == "auto"


@pytest.mark.postgres
@pytest.mark.parametrize("level", ["REPEATABLE_READ", "SERIALIZABLE"])
def test_a_send_in_a_snapshot_transaction_is_refused(pg_driver, level):
    import psycopg
    _parked_waiter(pg_driver)
    with pg_driver.connect() as conn:
        conn.isolation_level = getattr(psycopg.IsolationLevel, level)
        with pytest.raises(InvalidOption) as err:
            send(pg_driver, "paid", "o1", "x", conn=conn)
    assert err.value.code == "X_INVALID_OPTION" and "read committed" in str(err.value)


def test_a_delivery_is_recorded_at_the_send_whatever_happens_to_the_event(driver, clock):
    waiter = _parked_waiter(driver)
    assert send(driver, "paid", "o1", {"amount": 3}).woken == 1
    assert step(driver, waiter, "w").state == "completed"          # delivered by the send itself
    clock.advance(10_000)
    assert driver.event_prune(1, 10) == 1                          # gone before the job ran again
    assert wait(driver, reclaim(driver, waiter), "w").value == {"amount": 3}


@pytest.mark.postgres
def test_an_event_stored_without_a_send_wakes_its_waiter_at_the_next_rescue(pg_driver, clock):
    waiter = _parked_waiter(pg_driver)
    with pg_driver.connect() as conn:      # as a send whose snapshot could not see the park would
        conn.execute(f"insert into {pg_driver.schema}.events (name, key, payload, sent_at) "
                     "values ('paid', 'o1', '\"by hand\"', to_timestamp(%s / 1000.0))", (clock.now_ms(),))
    assert pg_driver.job_get(waiter).state == "suspended"
    assert pg_driver.job_rescue() == 1
    assert wait(pg_driver, reclaim(pg_driver, waiter), "w").value == "by hand"
