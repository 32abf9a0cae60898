"""The driver conformance suite: every test runs against the memory and the Postgres driver.

Both drivers share one ManualClock (the ``clock`` fixture), so time moves only when a test
says so. Expected values are spelled out, not read from the other driver: the parity is that
both drivers pass the same assertions.
"""

from __future__ import annotations

import math

import psycopg
import pytest

from tests.drivers.parity import LEASE, at, claim, claim_one, enqueue, new_job, state
from xjobs.drivers.base import Enqueued, Lease, ListFilter, Nack, NewJob, TenantRoom
from xjobs.errors import ClaimQueuesEmpty, InvalidOption, LeaseLost
from xjobs.drivers.base import Batch, Claim, ClaimAlone
from xjobs.errors import DriverError


# -- enqueue and the idempotency namespace -------------------------------------------------------


def test_enqueue_answers_ids_and_dedupes_live_keys(driver):
    assert driver.job_enqueue([new_job("a")]) == [Enqueued(1, False)]
    assert driver.job_enqueue([new_job("a")]) == [Enqueued(1, True)]
    # the deduplicated attempt consumed id 2, as an identity column does
    assert driver.job_enqueue([new_job("b")]) == [Enqueued(3, False)]
    assert driver.job_enqueue([]) == []


def test_in_batch_duplicates_answer_the_first_id(driver):
    batch = [new_job("a"), new_job("b"), new_job("a"), new_job("a", tenant=None), new_job("b")]
    assert driver.job_enqueue(batch) == [Enqueued(1, False), Enqueued(2, False), Enqueued(1, True),
                                         Enqueued(4, False), Enqueued(2, True)]
    assert driver.job_enqueue([new_job("c")]) == [Enqueued(6, False)]


def test_a_batch_larger_than_a_chunk_dedupes_across_its_chunks(driver):
    # the Postgres driver sends a large batch in chunks, in one transaction: an input whose
    # namespace an earlier chunk inserted is a duplicate of that row, as within one statement
    keys = [f"k{n}" for n in range(10_000)] + [f"k{n}" for n in range(2_000)]
    answers = driver.job_enqueue([new_job(key) for key in keys])
    assert answers[:10_000] == [Enqueued(n + 1, False) for n in range(10_000)]
    assert answers[10_000:] == [Enqueued(n + 1, True) for n in range(2_000)]


def test_a_chunked_batch_is_written_whole_or_not_at_all(pg_driver):
    # the database refuses one row of the second chunk: the first chunk is not kept
    batch = [new_job(f"k{n}") for n in range(6_000)]
    batch[5_500] = NewJob(name="send", queue="default", payload=b'"\\u0000"', idempotency_key="nul")
    with pytest.raises(DriverError) as err:
        pg_driver.job_enqueue(batch)
    assert isinstance(err.value.__cause__, psycopg.errors.UntranslatableCharacter)
    assert pg_driver.job_stats() == {}


def test_chunks_built_while_earlier_ones_are_inserted_are_one_call(driver):
    # job_enqueue_chunks: the answers in input order, duplicates across chunks found, and a
    # chunk that fails to build (the iterator raises) writes nothing, on a connection that
    # serves the next call as usual
    def chunks(fail_at: int | None = None):
        for c in range(3):
            if c == fail_at:
                raise ValueError("a key function raised")
            yield [new_job(f"k{n % 7_000}") for n in range(c * 5_000, (c + 1) * 5_000)]
    with pytest.raises(ValueError):
        driver.job_enqueue_chunks(chunks(fail_at=2))
    assert driver.job_stats() == {}
    answers = driver.job_enqueue_chunks(chunks())
    firsts = [a.id for a in answers[:7_000]]
    assert [a.deduped for a in answers[:7_000]] == [False] * 7_000 and firsts == sorted(set(firsts))
    assert [a.deduped for a in answers[7_000:]] == [True] * 8_000
    assert [a.id for a in answers[7_000:]] == [answers[n % 7_000].id for n in range(7_000, 15_000)]
    assert driver.job_enqueue([new_job("after")])[0].deduped is False


def test_namespace_is_name_tenant_key(driver):
    first = enqueue(driver, "k", tenant="acme")
    assert enqueue(driver, "k", tenant="other") != first
    assert enqueue(driver, "k", name="other-job") != first
    none_tenant = enqueue(driver, "k", tenant=None)
    assert driver.job_enqueue([new_job("k", tenant="")]) == [Enqueued(none_tenant, True)]


@pytest.mark.parametrize("finish", ["ack", "dead", "cancel"])
def test_a_finished_job_frees_its_key(driver, finish):
    first = enqueue(driver, "k")
    job = claim_one(driver)
    if finish == "ack":
        assert driver.job_ack(job.id, job.token)
    elif finish == "dead":
        assert driver.job_nack(Nack(job.id, job.token, "dead", error="boom"))
    else:
        driver.job_cancel(job.id)
    [again] = driver.job_enqueue([new_job("k")])
    assert again.id != first and not again.deduped


def test_running_and_suspended_jobs_still_hold_their_key(driver):
    first = enqueue(driver, "k")
    job = claim_one(driver)
    assert driver.job_enqueue([new_job("k")]) == [Enqueued(first, True)]
    assert driver.job_nack(Nack(job.id, job.token, "suspended", delay_ms=5000))
    assert state(driver, first) == "suspended"
    assert driver.job_enqueue([new_job("k")]) == [Enqueued(first, True)]


def test_enqueue_stores_every_field(driver, clock):
    now = clock.now_ms()
    job_id = enqueue(driver, "k", name="report", queue="reports", tenant="t1", priority=-3,
                     max_attempts=7, enqueued_by="cli", payload={"a": [1, 2.5, "x"], "b": None})
    view = driver.job_get(job_id)
    assert (view.id, view.name, view.queue, view.state, view.attempt, view.max_attempts) == \
        (job_id, "report", "reports", "ready", 0, 7)
    assert (view.tenant, view.idempotency_key, view.priority, view.enqueued_by) == ("t1", "k", -3, "cli")
    assert view.payload == {"a": [1, 2.5, "x"], "b": None}
    assert (at(view.run_at), at(view.created_at), view.finished_at) == (now, now, None)
    assert (view.last_error, view.claimed_by, view.lease_expires_at, view.history) == (None, None, None, ())


def test_payloads_are_fresh_copies(driver):
    job_id = enqueue(driver, "k", payload={"items": [1]})
    job = claim_one(driver)
    job.payload["items"].append(2)
    assert driver.job_get(job_id).payload == {"items": [1]}
    driver.job_get(job_id).payload["items"].append(3)
    assert driver.job_get(job_id).payload == {"items": [1]}


# -- claim ---------------------------------------------------------------------------------------


def test_a_delayed_job_is_claimable_once_the_clock_reaches_run_at(driver, clock):
    job_id = enqueue(driver, "k", run_at_ms=clock.now_ms() + 1000)
    assert claim(driver) == []
    clock.advance(999)
    assert claim(driver) == []
    clock.advance(1)
    assert [j.id for j in claim(driver)] == [job_id]


def test_claim_order_is_priority_then_run_at_then_id(driver, clock):
    now = clock.now_ms()
    ids = {
        "late-urgent": enqueue(driver, "a", priority=-1, run_at_ms=now - 10),
        "old-normal": enqueue(driver, "b", priority=0, run_at_ms=now - 500),
        "new-normal": enqueue(driver, "c", priority=0, run_at_ms=now - 100),
        "tie-first": enqueue(driver, "d", priority=5, run_at_ms=now - 50),
        "tie-second": enqueue(driver, "e", priority=5, run_at_ms=now - 50),
        "urgent": enqueue(driver, "f", priority=-1, run_at_ms=now - 20),
    }
    order = [claim_one(driver).id for _ in ids]
    expected = ["urgent", "late-urgent", "old-normal", "new-normal", "tie-first", "tie-second"]
    assert order == [ids[k] for k in expected]
    assert claim(driver) == []


def test_a_batch_claim_takes_the_first_in_order_and_answers_them_by_id(driver, clock):
    now = clock.now_ms()
    low = enqueue(driver, "a", priority=9)
    mid = enqueue(driver, "b", priority=1, run_at_ms=now - 1)
    top = enqueue(driver, "c", priority=0)
    jobs = claim(driver, limit=2)
    assert [j.id for j in jobs] == sorted([mid, top])
    assert len({j.token for j in jobs}) == 1
    assert state(driver, low) == "ready"


def test_claim_limit_zero_claims_nothing(driver):
    job_id = enqueue(driver, "k")
    assert driver.job_claim(Claim(["default"], 0, LEASE, "w1")) == []
    assert state(driver, job_id) == "ready"


def test_claim_reads_only_the_named_queues(driver):
    a = enqueue(driver, "a", queue="qa")
    b = enqueue(driver, "b", queue="qb")
    enqueue(driver, "c", queue="qc")
    assert claim(driver, "nowhere") == []
    jobs = driver.job_claim(Claim(["qb", "qa"], 10, LEASE, "w1"))
    assert [j.id for j in jobs] == [a, b]
    assert driver.job_stats()["qc"] == {"ready": 1}


def test_claim_starts_an_attempt_under_a_lease(driver, clock):
    job_id = enqueue(driver, "k", name="report", tenant=None, priority=2, max_attempts=3,
                     payload={"x": 1})
    job = claim_one(driver, worker="w7", lease=1500)
    assert (job.id, job.name, job.queue, job.payload, job.tenant) == (job_id, "report", "default", {"x": 1}, None)
    assert (job.attempt, job.max_attempts, job.priority) == (1, 3, 2)
    assert isinstance(job.token, int) and not isinstance(job.token, bool)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.claimed_by) == ("running", 1, "w7")
    assert at(view.lease_expires_at) == clock.now_ms() + 1500


@pytest.mark.parametrize("queues", [[], (), "default"])
def test_claim_refuses_an_empty_queue_list(driver, queues):
    with pytest.raises(ClaimQueuesEmpty) as err:
        driver.job_claim(Claim(queues, 1, LEASE, "w1"))
    assert err.value.code == "X_JOB_CLAIM_QUEUES_EMPTY"


@pytest.mark.parametrize("limit", [math.nan, math.inf, -1, 2.5, True, "3", None, 100_001])
def test_claim_refuses_a_bad_limit(driver, limit):
    enqueue(driver, "k")
    with pytest.raises(InvalidOption) as err:
        driver.job_claim(Claim(["default"], limit, LEASE, "w1"))
    assert err.value.code == "X_INVALID_OPTION"
    assert driver.job_stats() == {"default": {"ready": 1}}


@pytest.mark.parametrize("lease", [math.nan, math.inf, -math.inf, 0, -5, "soon"])
def test_claim_refuses_a_bad_lease(driver, lease):
    enqueue(driver, "k")
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["default"], 1, lease, "w1"))
    assert driver.job_stats() == {"default": {"ready": 1}}


def test_claim_accepts_duration_text_and_whole_floats(driver, clock):
    enqueue(driver, "k")
    [job] = driver.job_claim(Claim(["default"], 1.0, "2s", "w1"))  # type: ignore[arg-type]
    assert at(driver.job_get(job.id).lease_expires_at) == clock.now_ms() + 2000


@pytest.mark.parametrize("call", [
    lambda d: d.job_list(ListFilter(limit=math.nan)),  # type: ignore[arg-type]
    lambda d: d.job_list(ListFilter(limit=-1)),
    lambda d: d.job_rescue(2.5),
    lambda d: d.job_prune(0, 0, limit=math.inf),
    lambda d: d.job_dead(limit=-3),
    lambda d: d.job_renew(1, 12345, math.nan),
    lambda d: d.job_renew(1, 12345, 0),
    lambda d: d.job_nack(Nack(1, 12345, "retried", error="x", delay_ms=math.nan)),
    lambda d: d.job_nack(Nack(1, 12345, "retried", error="x", delay_ms=math.inf)),
    lambda d: d.job_prune(math.nan, 0),
    lambda d: d.job_prune(-1, 0),
    lambda d: d.job_claim_alone(ClaimAlone("default", LEASE, "w", math.nan)),
    lambda d: d.job_list(ListFilter(since_ms=math.inf)),
    lambda d: d.job_list(ListFilter(state="lost")),
    lambda d: d.job_requeue_batch(Batch(ListFilter(), 0, 10, -1), None),
    lambda d: d.job_cancel_batch(Batch(ListFilter(), 1.5, 10, 10), "x"),  # type: ignore[arg-type]
], ids=["list-nan", "list-negative", "rescue-fraction", "prune-inf", "dead-negative",
        "heartbeat-nan", "heartbeat-zero", "nack-nan", "nack-inf", "prune-nan", "prune-negative",
        "alone-wait-nan", "list-since-inf", "list-bad-state", "requeue-batch-negative",
        "cancel-batch-fraction"])
def test_row_limits_and_times_are_refused_alike(driver, call):
    with pytest.raises(InvalidOption):
        call(driver)


# -- fences --------------------------------------------------------------------------------------


def test_ack_completes_a_held_job_once(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver)
    clock.advance(250)
    assert driver.job_ack(job.id, job.token) is True
    view = driver.job_get(job.id)
    assert (view.state, at(view.finished_at), view.lease_expires_at) == ("completed", clock.now_ms(), None)
    assert driver.job_ack(job.id, job.token) is False
    assert driver.job_renew(job.id, job.token, LEASE) is False
    assert driver.job_nack(Nack(job.id, job.token, "retried", error="late")) is False
    assert state(driver, job.id) == "completed"


@pytest.mark.parametrize("wrong", [lambda t: t + 1, lambda t: -t, lambda t: 0, lambda t: str(t),
                                   lambda t: float(t), lambda t: None, lambda t: True,
                                   lambda t: t + 2**64],
                         ids=["other", "negated", "zero", "text", "float", "none", "bool", "too-big"])
def test_a_wrong_token_holds_nothing(driver, wrong):
    enqueue(driver, "k")
    job = claim_one(driver)
    token = wrong(job.token)
    assert driver.job_ack(job.id, token) is False
    assert driver.job_renew(job.id, token, LEASE) is False
    assert driver.job_nack(Nack(job.id, token, "retried", error="x")) is False
    with pytest.raises(LeaseLost):
        with driver.job_transaction(Lease(job.id, token)):
            pass
    assert driver.job_ack_many([Lease(job.id, token), Lease(job.id + 100, job.token),
                                Lease(str(job.id), job.token)]) == set()  # type: ignore[arg-type]
    view = driver.job_get(job.id)
    assert (view.state, view.last_error, view.history) == ("running", None, ())


def test_ack_many_answers_only_the_jobs_still_held(driver):
    for key in "abc":
        enqueue(driver, key)
    a, b, c = claim(driver)
    driver.job_cancel(b.id)
    assert driver.job_ack_many([Lease(a.id, a.token), Lease(b.id, b.token),
                                Lease(c.id, c.token + 1), Lease(999, a.token)]) == {a.id}
    assert driver.job_ack_many([]) == set()
    assert driver.job_renew_many([], LEASE) == set()


def test_cancel_reaches_a_running_job_and_fences_its_worker(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    view = driver.job_cancel(job.id, reason="operator said so")
    assert (view.state, view.last_error, view.lease_expires_at) == ("cancelled", "operator said so", None)
    assert driver.job_renew(job.id, job.token, LEASE) is False
    assert driver.job_nack(Nack(job.id, job.token, "retried", error="failed")) is False
    assert driver.job_ack(job.id, job.token) is False
    assert driver.job_get(job.id).last_error == "operator said so"


def test_a_rescued_lease_is_dead_to_its_old_worker(driver, clock):
    enqueue(driver, "k")
    old = claim_one(driver, worker="w1", lease=1000)
    clock.advance(1001)
    assert driver.job_rescue() == 1
    new = claim_one(driver, worker="w2")
    assert new.attempt == 2 and new.token != old.token
    assert driver.job_ack(old.id, old.token) is False
    assert driver.job_renew(old.id, old.token, LEASE) is False
    assert driver.job_nack(Nack(old.id, old.token, "retried", error="stale")) is False
    assert driver.job_ack(new.id, new.token) is True


def test_heartbeat_extends_the_lease(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver, lease=1000)
    clock.advance(900)
    assert driver.job_renew_many([Lease(job.id, job.token)], 1000) == {job.id}
    assert at(driver.job_get(job.id).lease_expires_at) == clock.now_ms() + 1000
    clock.advance(900)
    assert driver.job_rescue() == 0
    clock.advance(101)
    assert driver.job_rescue() == 1


# -- nack ----------------------------------------------------------------------------------------


def test_nack_retry_schedules_the_next_attempt(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver)
    now = clock.now_ms()
    assert driver.job_nack(Nack(job.id, job.token, "retried", error="boom", delay_ms=2000)) is True
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.last_error, at(view.run_at)) == ("ready", 1, "boom", now + 2000)
    assert view.lease_expires_at is None and view.finished_at is None
    assert [(at(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(now, 1, "retried", "boom")]
    assert claim(driver) == []
    clock.advance(2000)
    assert claim_one(driver).attempt == 2


def test_nack_that_does_not_count_gives_the_attempt_back(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    assert driver.job_nack(Nack(job.id, job.token, "interrupted", error="drained"))
    view = driver.job_get(job.id)
    assert (view.state, view.attempt) == ("ready", 0)
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "interrupted")]
    assert claim_one(driver).attempt == 1


def test_a_claim_leaves_blocked_tenants_and_takes_no_more_of_one_than_its_room(driver):
    acme = [enqueue(driver, f"a{n}", tenant="acme") for n in range(3)]
    [globex] = [enqueue(driver, "g", tenant="globex")]
    [untenanted] = [enqueue(driver, "u", tenant=None)]
    blocked = TenantRoom(blocked=("acme", ""))                 # "" is the jobs without a tenant
    assert [j.id for j in driver.job_claim(Claim(["default"], 10, LEASE, "w", tenants=blocked))] == [globex]
    # a ceiling of 2 with one of acme's already running here: room for one more of acme's
    room = TenantRoom(ceiling=2, held={"acme": 1})
    assert [j.id for j in driver.job_claim(Claim(["default"], 10, LEASE, "w", tenants=room))] == [acme[0], untenanted]
    assert [j.id for j in driver.job_claim(Claim(["default"], 10, LEASE, "w", tenants=TenantRoom(ceiling=1)))] == [acme[1]]


@pytest.mark.parametrize("bad", [TenantRoom(blocked="acme"), TenantRoom(blocked=(1,)),  # type: ignore[arg-type]
                                 TenantRoom(ceiling=-1), TenantRoom(ceiling=float("nan")),  # type: ignore[arg-type]
                                 TenantRoom(held={"acme": -1}), "acme"])
def test_a_tenant_room_is_checked(driver, bad):
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["default"], 1, LEASE, "w", tenants=bad))


def test_filters_apply_to_a_claim_on_one_queue(driver):
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["default", "other"], 1, LEASE, "w", tenants=TenantRoom(ceiling=1)))
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["default", "other"], 1, LEASE, "w", caps={"send": 1}))


def test_a_shed_stays_ready_keeps_its_place_and_age_and_writes_no_history(driver, clock):
    enqueue(driver, "k")
    enqueue(driver, "later")
    job = claim_one(driver)
    clock.advance(60_000)
    assert driver.job_nack(Nack(job.id, job.token, "shed"))
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.last_error, list(view.history)) == ("ready", 0, None, [])
    summary = driver.queue_summary()["default"]
    assert (summary.depth, round(summary.oldest_ready_ms)) == (2, 60_000)   # still the oldest, counted
    again = claim_one(driver)
    assert again.id == job.id                             # first in line again
    # a shed told to wait (a per-process rate limit) is not due before then
    assert driver.job_nack(Nack(again.id, again.token, "shed", delay_ms=5_000))
    assert [j.id for j in claim(driver)] != [job.id]      # only "later"
    clock.advance(5_000)
    assert [j.id for j in claim(driver)] == [job.id]


def test_nack_park_suspends_until_due_and_rescue_wakes_it(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver)
    assert driver.job_nack(Nack(job.id, job.token, "suspended", delay_ms=5000))
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.last_error) == ("suspended", 0, None)
    clock.advance(4999)
    assert driver.job_rescue() == 0
    assert claim(driver) == []
    clock.advance(1)
    assert driver.job_rescue() == 1
    assert state(driver, job.id) == "ready"
    assert claim_one(driver).attempt == 1


def test_nack_dead_dead_letters_the_job(driver, clock):
    job_id = enqueue(driver, "k")
    run_at = driver.job_get(job_id).run_at
    job = claim_one(driver)
    clock.advance(10)
    assert driver.job_nack(Nack(job.id, job.token, "dead", error="terminal"))
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("dead", 1, "terminal")
    assert (at(view.finished_at), at(view.run_at)) == (clock.now_ms(), at(run_at))
    assert [v.id for v in driver.job_dead()] == [job_id]


def test_nack_without_an_error_keeps_the_last_one(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "retried", error="first failure"))
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "interrupted"))
    view = driver.job_get(job.id)
    assert view.last_error == "first failure"
    assert [(h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(1, "retried", "first failure"), (2, "interrupted", None)]


@pytest.mark.parametrize("finish", ["ack_many", "transaction", "cancel"])
def test_a_finished_job_stands_in_no_earlier_error_and_its_history_keeps_it(driver, finish):
    # last_error is the error the job stands in now: completion clears it, a cancel replaces it
    # with its reason ("cancelled" when none is given); the failed attempt stays in the history
    enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "retried", error="first failure"))
    job = claim_one(driver)
    if finish == "ack_many":
        assert driver.job_ack_many([Lease(job.id, job.token)]) == {job.id}
    elif finish == "transaction":
        with driver.job_transaction(Lease(job.id, job.token)):
            pass
    else:
        driver.job_cancel(job.id)
    view = driver.job_get(job.id)
    assert (view.state, view.last_error) == \
        (("cancelled", "cancelled") if finish == "cancel" else ("completed", None))
    assert [(h["attempt"], h["outcome"], h["error"]) for h in view.history][0] == (1, "retried", "first failure")
    assert driver.job_list(ListFilter(error="first failure")) == []


def test_job_get_says_when_the_latest_run_began(driver, clock):
    enqueue(driver, "k")
    assert driver.job_get(1).started_at is None
    claim_one(driver)
    began = clock.now_ms()
    clock.advance(500)
    view = driver.job_get(1)
    assert (at(view.started_at), view.claimed_by) == (began, "w1")
    assert [v.started_at for v in driver.job_list(ListFilter())] == [None]   # what job_get adds
