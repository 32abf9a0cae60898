"""The driver conformance suite: every test runs against the memory and the Postgres driver.

Both drivers share one ManualClock (the ``clock`` fixture), so time moves only when a test
says so. Expected values are spelled out, not read from the other driver: the parity is that
both drivers pass the same assertions.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xjobs.clock import SYSTEM_CLOCK, ManualClock
from xjobs.drivers.base import STATES, Enqueued, Lease, ListFilter, Nack, NewJob, TenantRoom
from xjobs.drivers.jsonb import as_stored
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.postgres import PostgresDriver
from xjobs.errors import (ClaimQueuesEmpty, DuplicateJob, InvalidOption, JobNotFound, LeaseLost,
                          NotCancellable, NotRetryable)
from xjobs.payload import encode_payload

LEASE = 30_000.0


def new_job(key: str = "k1", *, name: str = "send", queue: str = "default",
            tenant: str | None = "acme", payload: object = None, priority: int = 0,
            max_attempts: int = 5, run_at_ms: float | None = None,
            enqueued_by: str | None = None) -> NewJob:
    return NewJob(name=name, queue=queue, payload=encode_payload(payload if payload is not None else {"key": key}),
                  idempotency_key=key, tenant=tenant, enqueued_by=enqueued_by, priority=priority,
                  max_attempts=max_attempts, run_at_ms=run_at_ms)


def enqueue(driver, key: str = "k1", **kw) -> int:
    [result] = driver.job_enqueue([new_job(key, **kw)])
    assert not result.deduped
    return result.id


def claim(driver, queue: str = "default", limit: int = 10, worker: str = "w1", lease: float = LEASE):
    return driver.job_claim([queue], limit, lease, worker)


def claim_one(driver, queue: str = "default", **kw):
    [job] = claim(driver, queue, limit=1, **kw)
    return job


def at(value: float | None) -> float | None:
    """Postgres hands times back through float8 seconds; compare them to the microsecond."""
    return None if value is None else round(value, 3)


def state(driver, job_id: int) -> str:
    return driver.job_get(job_id).state


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
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        pg_driver.job_enqueue(batch)
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
        assert driver.job_nack(Nack(job.id, job.token, "boom", dead=True, outcome="dead"))
    else:
        driver.job_cancel(job.id)
    [again] = driver.job_enqueue([new_job("k")])
    assert again.id != first and not again.deduped


def test_running_and_suspended_jobs_still_hold_their_key(driver):
    first = enqueue(driver, "k")
    job = claim_one(driver)
    assert driver.job_enqueue([new_job("k")]) == [Enqueued(first, True)]
    assert driver.job_nack(Nack(job.id, job.token, None, delay_ms=5000, park=True, outcome="suspended"))
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
    assert driver.job_claim(["default"], 0, LEASE, "w1") == []
    assert state(driver, job_id) == "ready"


def test_claim_reads_only_the_named_queues(driver):
    a = enqueue(driver, "a", queue="qa")
    b = enqueue(driver, "b", queue="qb")
    enqueue(driver, "c", queue="qc")
    assert claim(driver, "nowhere") == []
    jobs = driver.job_claim(["qb", "qa"], 10, LEASE, "w1")
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
        driver.job_claim(queues, 1, LEASE, "w1")
    assert err.value.code == "X_JOB_CLAIM_QUEUES_EMPTY"


@pytest.mark.parametrize("limit", [math.nan, math.inf, -1, 2.5, True, "3", None, 100_001])
def test_claim_refuses_a_bad_limit(driver, limit):
    enqueue(driver, "k")
    with pytest.raises(InvalidOption) as err:
        driver.job_claim(["default"], limit, LEASE, "w1")
    assert err.value.code == "X_INVALID_OPTION"
    assert driver.job_stats() == {"default": {"ready": 1}}


@pytest.mark.parametrize("lease", [math.nan, math.inf, -math.inf, 0, -5, "soon"])
def test_claim_refuses_a_bad_lease(driver, lease):
    enqueue(driver, "k")
    with pytest.raises(InvalidOption):
        driver.job_claim(["default"], 1, lease, "w1")
    assert driver.job_stats() == {"default": {"ready": 1}}


def test_claim_accepts_duration_text_and_whole_floats(driver, clock):
    enqueue(driver, "k")
    [job] = driver.job_claim(["default"], 1.0, "2s", "w1")
    assert at(driver.job_get(job.id).lease_expires_at) == clock.now_ms() + 2000


@pytest.mark.parametrize("call", [
    lambda d: d.job_list(ListFilter(limit=math.nan)),
    lambda d: d.job_list(ListFilter(limit=-1)),
    lambda d: d.job_rescue(2.5),
    lambda d: d.job_prune(0, 0, limit=math.inf),
    lambda d: d.job_dead(limit=-3),
    lambda d: d.job_heartbeat(1, 12345, math.nan),
    lambda d: d.job_heartbeat(1, 12345, 0),
    lambda d: d.job_nack(Nack(1, 12345, "x", delay_ms=math.nan)),
    lambda d: d.job_nack(Nack(1, 12345, "x", delay_ms=math.inf)),
    lambda d: d.job_prune(math.nan, 0),
    lambda d: d.job_prune(-1, 0),
    lambda d: d.job_claim_alone("default", LEASE, "w", math.nan),
    lambda d: d.job_list(ListFilter(since_ms=math.inf)),
    lambda d: d.job_list(ListFilter(state="lost")),
    lambda d: d.job_requeue_batch(ListFilter(), 0, 10, -1, None),
    lambda d: d.job_cancel_batch(ListFilter(), 1.5, 10, 10, "x"),
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
    assert driver.job_heartbeat(job.id, job.token, LEASE) is False
    assert driver.job_nack(Nack(job.id, job.token, "late")) is False
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
    assert driver.job_heartbeat(job.id, token, LEASE) is False
    assert driver.job_nack(Nack(job.id, token, "x")) is False
    with pytest.raises(LeaseLost):
        with driver.job_transaction(Lease(job.id, token)):
            pass
    assert driver.job_ack_many([Lease(job.id, token), Lease(job.id + 100, job.token),
                                Lease(str(job.id), job.token)]) == set()
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
    assert driver.job_heartbeat_many([], LEASE) == set()


def test_cancel_reaches_a_running_job_and_fences_its_worker(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    view = driver.job_cancel(job.id, reason="operator said so")
    assert (view.state, view.last_error, view.lease_expires_at) == ("cancelled", "operator said so", None)
    assert driver.job_heartbeat(job.id, job.token, LEASE) is False
    assert driver.job_nack(Nack(job.id, job.token, "failed")) is False
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
    assert driver.job_heartbeat(old.id, old.token, LEASE) is False
    assert driver.job_nack(Nack(old.id, old.token, "stale")) is False
    assert driver.job_ack(new.id, new.token) is True


def test_heartbeat_extends_the_lease(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver, lease=1000)
    clock.advance(900)
    assert driver.job_heartbeat_many([Lease(job.id, job.token)], 1000) == {job.id}
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
    assert driver.job_nack(Nack(job.id, job.token, "boom", delay_ms=2000)) is True
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
    assert driver.job_nack(Nack(job.id, job.token, "drained", counts_as_attempt=False,
                                outcome="interrupted"))
    view = driver.job_get(job.id)
    assert (view.state, view.attempt) == ("ready", 0)
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "interrupted")]
    assert claim_one(driver).attempt == 1


def test_a_claim_leaves_blocked_tenants_and_takes_no_more_of_one_than_its_room(driver):
    acme = [enqueue(driver, f"a{n}", tenant="acme") for n in range(3)]
    [globex] = [enqueue(driver, "g", tenant="globex")]
    [untenanted] = [enqueue(driver, "u", tenant=None)]
    blocked = TenantRoom(blocked=("acme", ""))                 # "" is the jobs without a tenant
    assert [j.id for j in driver.job_claim(["default"], 10, LEASE, "w", tenants=blocked)] == [globex]
    # a ceiling of 2 with one of acme's already running here: room for one more of acme's
    room = TenantRoom(ceiling=2, held={"acme": 1})
    assert [j.id for j in driver.job_claim(["default"], 10, LEASE, "w", tenants=room)] == [acme[0], untenanted]
    assert [j.id for j in driver.job_claim(["default"], 10, LEASE, "w", tenants=TenantRoom(ceiling=1))] == [acme[1]]


@pytest.mark.parametrize("bad", [TenantRoom(blocked="acme"), TenantRoom(blocked=(1,)),  # type: ignore[arg-type]
                                 TenantRoom(ceiling=-1), TenantRoom(ceiling=float("nan")),  # type: ignore[arg-type]
                                 TenantRoom(held={"acme": -1}), "acme"])
def test_a_tenant_room_is_checked(driver, bad):
    with pytest.raises(InvalidOption):
        driver.job_claim(["default"], 1, LEASE, "w", tenants=bad)


def test_filters_apply_to_a_claim_on_one_queue(driver):
    with pytest.raises(InvalidOption):
        driver.job_claim(["default", "other"], 1, LEASE, "w", tenants=TenantRoom(ceiling=1))
    with pytest.raises(InvalidOption):
        driver.job_claim(["default", "other"], 1, LEASE, "w", caps={"send": 1})


def test_a_shed_stays_ready_keeps_its_place_and_age_and_writes_no_history(driver, clock):
    enqueue(driver, "k")
    enqueue(driver, "later")
    job = claim_one(driver)
    clock.advance(60_000)
    assert driver.job_nack(Nack(job.id, job.token, None, counts_as_attempt=False, outcome="shed"))
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.last_error, list(view.history)) == ("ready", 0, None, [])
    summary = driver.queue_summary()["default"]
    assert (summary.depth, round(summary.oldest_ready_ms)) == (2, 60_000)   # still the oldest, counted
    again = claim_one(driver)
    assert again.id == job.id                             # first in line again
    # a shed told to wait (a per-process rate limit) is not due before then
    assert driver.job_nack(Nack(again.id, again.token, None, delay_ms=5_000, counts_as_attempt=False,
                                outcome="shed"))
    assert [j.id for j in claim(driver)] != [job.id]      # only "later"
    clock.advance(5_000)
    assert [j.id for j in claim(driver)] == [job.id]


def test_nack_park_suspends_until_due_and_rescue_wakes_it(driver, clock):
    enqueue(driver, "k")
    job = claim_one(driver)
    assert driver.job_nack(Nack(job.id, job.token, None, delay_ms=5000, counts_as_attempt=False,
                                park=True, outcome="suspended"))
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
    assert driver.job_nack(Nack(job.id, job.token, "terminal", delay_ms=9999, dead=True, outcome="dead"))
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("dead", 1, "terminal")
    assert (at(view.finished_at), at(view.run_at)) == (clock.now_ms(), at(run_at))
    assert [v.id for v in driver.job_dead()] == [job_id]


def test_nack_without_an_error_keeps_the_last_one(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "first failure"))
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, None, counts_as_attempt=False, outcome="interrupted"))
    view = driver.job_get(job.id)
    assert view.last_error == "first failure"
    assert [(h["attempt"], h["outcome"], h["error"]) for h in view.history] == \
        [(1, "retried", "first failure"), (2, "interrupted", None)]


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
    released = driver.job_release_worker("w1", how="killed by SIGKILL")
    assert [(r.id, r.state, r.outcome) for r in released] == [(a.id, "ready", "quarantined"),
                                                               (b.id, "ready", "quarantined")]
    assert driver.job_release_worker("w1") == []
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
    [released] = driver.job_release_worker("w1", how="exited with code 3")
    assert (released.id, released.state, released.outcome) == (job.id, "ready", "crashed")
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.crashes) == ("ready", 1, 1)
    assert view.last_error == "crashed its worker process (exited with code 3, w1); attempt counted, runs alone next"
    assert claim(driver) == []                         # a suspect: the ordinary claim skips it
    again = driver.job_claim_alone("default", LEASE, "w2")[0]
    assert (again.id, again.attempt) == (job.id, 2)
    [released] = driver.job_release_worker("w2", how="exited with code 3")
    assert (released.state, released.outcome) == ("dead", "dead")
    view = driver.job_get(job.id)
    assert (view.state, view.attempt, view.crashes) == ("dead", 2, 2)
    assert view.last_error == "dead: crashed its worker process on the last attempt (exited with code 3, w2)"
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "crashed"), (2, "dead")]


def test_a_suspect_is_claimed_alone_after_it_waited_and_cleared_once_it_ends_on_its_own(driver, clock):
    for key in "abc":
        enqueue(driver, key)
    a, b = claim(driver, limit=2, worker="w1")
    driver.job_release_worker("w1")
    assert [j.id for j in claim(driver)] == [3]        # c: the suspects a and b are skipped
    assert driver.job_claim_alone("default", LEASE, "w2", waited_ms=1000) == []   # not waited yet
    clock.advance(1000)
    got = driver.job_claim_alone("default", LEASE, "w2", waited_ms=1000)
    assert [j.id for j in got] == [a.id]               # one at a time, oldest first
    assert driver.job_nack(Nack(a.id, got[0].token, "boom", 0.0)) is True
    assert driver.job_get(a.id).crashes == 0            # it ended on its own: no longer a suspect
    assert [j.id for j in claim(driver)] == [a.id]
    driver.queue_pause("default", True)
    assert driver.job_claim_alone("default", LEASE, "w2") == []   # paused is paused for suspects too
    driver.queue_pause("default", False)
    again = driver.job_claim_alone("default", LEASE, "w2")
    assert [j.id for j in again] == [b.id]
    # an interrupted run (attempt given back) keeps the suspicion
    assert driver.job_nack(Nack(b.id, again[0].token, "drained", 0.0, counts_as_attempt=False)) is True
    assert driver.job_get(b.id).crashes == 1


def _claim_group(driver, worker: str, limit: int = 10) -> list:
    return driver.job_claim_alone("default", LEASE, worker, limit=limit)


def _ids(jobs) -> list[int]:
    return [j.id for j in jobs]


def test_a_crashed_processs_jobs_are_split_in_halves_that_run_apart(driver):
    ids = [enqueue(driver, key) for key in "abcde"]
    claim(driver, limit=5, worker="w1")
    driver.job_release_worker("w1", how="killed by SIGKILL")
    first = _claim_group(driver, "w2")
    second = _claim_group(driver, "w3")
    assert (_ids(first), _ids(second)) == (ids[:3], ids[3:])     # the odd one in the first half
    assert _claim_group(driver, "w4") == []
    # the first half crashes again: it is halved again; the second ends on its own
    driver.job_release_worker("w2", how="killed by SIGKILL")
    for job in second:
        assert driver.job_nack(Nack(job.id, job.token, "fine", 0.0)) is True
        assert driver.job_get(job.id).crashes == 0
    assert _ids(_claim_group(driver, "w5")) == ids[:2] and _ids(_claim_group(driver, "w6")) == ids[2:3]
    assert [driver.job_get(i).crashes for i in ids[:3]] == [2, 2, 2]
    # a half of one is a job alone: its crash is its own
    [released] = driver.job_release_worker("w6", how="killed by SIGKILL")
    assert (released.id, released.outcome) == (ids[2], "crashed")


def test_a_group_is_claimed_up_to_the_limit_and_the_rest_stays_for_another_claim(driver):
    ids = [enqueue(driver, key) for key in "abcdefgh"]
    claim(driver, limit=8, worker="w1")
    driver.job_release_worker("w1", how="killed by SIGKILL")
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
    [released] = driver.job_release_worker("w1", crashed=False)
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
    [released] = driver.job_release_worker("silent", how="killed (silent)", charge="suspect")
    assert (released.outcome, driver.job_get(a.id).attempt) == ("quarantined", 0)   # not yet a suspect
    again = driver.job_claim_alone("default", LEASE, "silent-2")[0]
    [released] = driver.job_release_worker("silent-2", how="killed (silent)", charge="suspect")
    assert (released.id, released.outcome, driver.job_get(a.id).attempt) == (again.id, "crashed", 1)
    b = claim_one(driver, worker="busy")
    [released] = driver.job_release_worker("busy", charge="never")     # other bodies ran in it
    assert (released.id, released.outcome) == (b.id, "quarantined")
    with pytest.raises(InvalidOption):
        driver.job_release_worker("w", charge="maybe")


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
    assert [r.outcome for r in driver.job_release_worker("w1")] == []   # nothing left to hand back
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


# -- operator verbs ------------------------------------------------------------------------------


@pytest.mark.parametrize("before", ["ready", "suspended"])
def test_cancel_a_waiting_job(driver, clock, before):
    job_id = enqueue(driver, "k")
    if before == "suspended":
        job = claim_one(driver)
        driver.job_nack(Nack(job.id, job.token, None, delay_ms=60_000, park=True))
    clock.advance(5)
    view = driver.job_cancel(job_id)
    assert (view.state, view.last_error, at(view.finished_at)) == ("cancelled", "cancelled", clock.now_ms())
    assert (view.history[-1]["outcome"], view.history[-1]["error"]) == ("cancelled", "cancelled")
    assert claim(driver) == []


def test_cancel_refuses_finished_and_unknown_jobs(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    with pytest.raises(NotCancellable) as err:
        driver.job_cancel(job.id)
    assert err.value.code == "X_JOB_NOT_CANCELLABLE"
    with pytest.raises(JobNotFound) as err:
        driver.job_cancel(12345)
    assert err.value.code == "X_JOB_NOT_FOUND"
    with pytest.raises(JobNotFound):
        driver.job_get(12345)
    other = enqueue(driver, "other")
    driver.job_cancel(other)
    with pytest.raises(NotCancellable):
        driver.job_cancel(other)


def test_requeue_runs_a_dead_job_again_from_attempt_zero(driver, clock):
    enqueue(driver, "k", max_attempts=1)
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "boom", dead=True, outcome="dead"))
    clock.advance(7)
    view = driver.job_requeue(job.id)
    assert (view.state, view.attempt, view.finished_at, view.last_error) == ("ready", 0, None, "boom")
    assert at(view.run_at) == clock.now_ms()
    assert [(h["attempt"], h["outcome"]) for h in view.history] == [(1, "dead"), (0, "requeued")]
    assert claim_one(driver).attempt == 1


def test_requeue_refuses_live_unknown_and_duplicate_jobs(driver):
    job_id = enqueue(driver, "k")
    with pytest.raises(NotRetryable) as err:
        driver.job_requeue(job_id)
    assert err.value.code == "X_JOB_NOT_RETRYABLE"
    with pytest.raises(JobNotFound):
        driver.job_requeue(999)
    driver.job_cancel(job_id)
    successor = enqueue(driver, "k")
    with pytest.raises(DuplicateJob) as err:
        driver.job_requeue(job_id)
    assert err.value.code == "X_JOB_DUPLICATE"
    assert state(driver, job_id) == "cancelled"
    driver.job_cancel(successor)
    assert driver.job_requeue(job_id).state == "ready"
    assert driver.job_enqueue([new_job("k")]) == [Enqueued(job_id, True)]


def test_stats_count_every_row_in_exactly_one_bucket(driver):
    ids = [enqueue(driver, f"k{i}", queue="q1" if i % 2 else "q2") for i in range(8)]
    jobs = claim(driver, "q1") + claim(driver, "q2", limit=2)     # q1: 1 3 5 7, q2: 0 2
    by_id = {j.id: j for j in jobs}
    j1, j3, j5, j0, j2 = (by_id[ids[i]] for i in (1, 3, 5, 0, 2))
    driver.job_ack(j1.id, j1.token)
    driver.job_nack(Nack(j3.id, j3.token, "x", dead=True))
    driver.job_nack(Nack(j5.id, j5.token, None, delay_ms=1000, park=True))
    driver.job_nack(Nack(j0.id, j0.token, "again", delay_ms=1000))
    driver.job_cancel(j2.id)
    stats = driver.job_stats()
    assert stats == {"q1": {"completed": 1, "dead": 1, "suspended": 1, "running": 1},
                     "q2": {"ready": 3, "cancelled": 1}}
    assert sum(n for per in stats.values() for n in per.values()) == len(ids)
    assert all(s in STATES for per in stats.values() for s in per)


def test_queue_summary_counts_ready_now_jobs(driver, clock):
    now = clock.now_ms()
    enqueue(driver, "a", queue="q1", run_at_ms=now - 4000)
    enqueue(driver, "b", queue="q1", run_at_ms=now - 1000)
    enqueue(driver, "c", queue="q1", run_at_ms=now + 1000)
    enqueue(driver, "d", queue="q2")
    enqueue(driver, "e", queue="q3")
    claim_one(driver, "q3")
    clock.advance(500)
    summary = driver.queue_summary()
    assert set(summary) == {"q1", "q2"}
    assert (summary["q1"].depth, round(summary["q1"].oldest_ready_ms, 3)) == (2, 4500)
    assert (summary["q2"].depth, round(summary["q2"].oldest_ready_ms, 3)) == (1, 500)


def test_list_is_newest_first_with_filters(driver):
    a = enqueue(driver, "a", queue="q1", name="n1")
    b = enqueue(driver, "b", queue="q2", name="n1")
    c = enqueue(driver, "c", queue="q1", name="n2")
    d = enqueue(driver, "d", queue="q1", name="n1")
    job = claim_one(driver, "q2")
    driver.job_nack(Nack(job.id, job.token, "x", dead=True))

    def ids(**where):
        return [v.id for v in driver.job_list(ListFilter(**where))]
    assert ids() == [d, c, b, a]
    assert ids(limit=2) == [d, c]
    assert ids(limit=0) == []
    assert ids(queue="q1") == [d, c, a]
    assert ids(queue="q1", name="n1") == [d, a]
    assert ids(state="dead") == [b]
    assert ids(state="ready", name="n2") == [c]
    assert ids(queue="nope") == []
    listed = driver.job_list(ListFilter(limit=1))[0]
    assert (listed.payload, listed.history) == (None, ())


def test_prune_deletes_old_finished_jobs_within_its_limit(driver, clock):
    for key in "abcdef":
        enqueue(driver, key)
    a, b, c, d, e, f = claim(driver)
    driver.job_ack(a.id, a.token)
    clock.advance(10)
    driver.job_ack(b.id, b.token)
    clock.advance(10)
    driver.job_nack(Nack(c.id, c.token, "x", dead=True))
    clock.advance(10)
    driver.job_cancel(d.id)
    clock.advance(10)
    driver.job_ack(e.id, e.token)
    # retention is measured back from the driver's now (the database's clock)
    assert driver.job_prune(0, 0, limit=0) == 0
    assert driver.job_prune(0, 15, limit=1) == 1      # a: the oldest first
    assert driver.job_prune(0, 15, limit=10) == 2     # b and c; d is too recent
    assert driver.job_prune(0, 0, limit=10) == 1      # d; e finished at the cutoff
    for gone in (a, b, c, d):
        with pytest.raises(JobNotFound):
            driver.job_get(gone.id)
    assert [v.id for v in driver.job_list(ListFilter())] == [f.id, e.id]
    assert driver.job_stats() == {"default": {"completed": 1, "running": 1}}


# -- job_transaction -----------------------------------------------------------------------------


def test_job_transaction_completes_the_job_on_a_clean_exit(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    with driver.job_transaction(Lease(job.id, job.token)) as conn:
        follow_up = driver.job_enqueue([new_job("follow-up")], conn=conn)[0].id
    assert state(driver, job.id) == "completed"
    assert state(driver, follow_up) == "ready"


def test_job_transaction_rolls_back_when_the_lease_is_lost(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    with pytest.raises(LeaseLost) as err:
        with driver.job_transaction(Lease(job.id, job.token)) as conn:
            follow_up = driver.job_enqueue([new_job("follow-up")], conn=conn)[0].id
            driver.job_cancel(job.id)
    assert err.value.code == "X_JOB_LEASE_LOST"
    assert state(driver, job.id) == "cancelled"
    with pytest.raises(JobNotFound):
        driver.job_get(follow_up)


def test_job_transaction_leaves_the_job_running_when_the_body_fails(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    with pytest.raises(RuntimeError):
        with driver.job_transaction(Lease(job.id, job.token)) as conn:
            follow_up = driver.job_enqueue([new_job("follow-up")], conn=conn)[0].id
            raise RuntimeError("body failed")
    assert state(driver, job.id) == "running"
    with pytest.raises(JobNotFound):
        driver.job_get(follow_up)
    assert driver.job_ack(job.id, job.token) is True


def test_the_memory_driver_refuses_a_foreign_connection(memory_driver):
    with pytest.raises(InvalidOption):
        memory_driver.job_enqueue([new_job("k")], conn=object())
    other = MemoryDriver(clock=memory_driver.clock)
    other.job_enqueue([new_job("k")])
    job = other.job_claim(["default"], 1, LEASE, "w1")[0]
    with other.job_transaction(Lease(job.id, job.token)) as conn:
        with pytest.raises(InvalidOption):
            memory_driver.job_enqueue([new_job("k")], conn=conn)
    assert memory_driver.job_stats() == {}


# -- concurrency ---------------------------------------------------------------------------------


def _at_once(count: int, call):
    """Run ``call(i)`` on ``count`` threads released together; answer their results."""
    barrier = threading.Barrier(count, timeout=30)

    def run(i):
        barrier.wait()
        return call(i)
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def test_concurrent_claims_never_hand_out_a_job_twice(driver):
    ids = [r.id for r in driver.job_enqueue([new_job(f"k{i}") for i in range(40)])]

    def drain(i):
        mine = []
        while jobs := driver.job_claim(["default"], 3, LEASE, f"w{i}"):
            mine += [j.id for j in jobs]
        return mine
    claimed = [job_id for mine in _at_once(4, drain) for job_id in mine]
    assert sorted(claimed) == ids
    assert driver.job_stats() == {"default": {"running": 40}}


def test_concurrent_enqueues_of_one_key_make_one_job(driver):
    results = _at_once(4, lambda i: driver.job_enqueue([new_job("same"), new_job(f"own{i}")]))
    same = [r[0] for r in results]
    assert len({r.id for r in same}) == 1
    assert sorted(r.deduped for r in same) == [False, True, True, True]
    assert not any(r[1].deduped for r in results)
    assert driver.job_stats() == {"default": {"ready": 5}}


# -- names are data ------------------------------------------------------------------------------


HOSTILE = ["constructor", "__proto__", "toString", "x'; drop table y; --", 'q"uote', "ü\\n%s%(now)s"]


@pytest.mark.parametrize("text", HOSTILE)
def test_names_are_plain_data(driver, text):
    first = enqueue(driver, text, name=text, queue=text, tenant=text, payload={text: text})
    assert driver.job_enqueue([new_job(text, name=text, queue=text, tenant=text)]) == [Enqueued(first, True)]
    assert enqueue(driver, text, name=text, queue=text, tenant=None) != first
    assert driver.job_stats() == {text: {"ready": 2}}
    assert driver.queue_summary()[text].depth == 2
    assert [v.id for v in driver.job_list(ListFilter(queue=text, name=text, state="ready"))] == [3, first]
    job = driver.job_claim([text, "default"], 1, LEASE, text)[0]
    assert (job.id, job.name, job.queue, job.tenant, job.payload) == (first, text, text, text, {text: text})
    assert [r.id for r in driver.job_release_worker(text, how=text)] == [first]
    view = driver.job_get(first)
    assert (view.idempotency_key, view.claimed_by) == (text, text)
    assert view.last_error == f"crashed its worker process ({text}, {text}); attempt counted, runs alone next"
    assert driver.job_cancel(first, reason=text).last_error == text


def test_queue_counts_hold_live_states_and_dead_letters_only(driver, clock):
    from xjobs.drivers.base import Lease, Nack, NewJob
    jobs = [NewJob(name="n", queue=q, payload=b"{}", idempotency_key=str(i), max_attempts=1)
            for i, q in enumerate(["a", "a", "a", "b"])]
    driver.job_enqueue(jobs)
    first, second = driver.job_claim(["a"], 2, 30_000, "w")
    driver.job_ack_many([Lease(first.id, first.token)])
    driver.job_nack(Nack(second.id, second.token, "boom", dead=True, outcome="dead"))
    assert driver.queue_counts() == {"a": {"ready": 1, "dead": 1}, "b": {"ready": 1}}
    assert driver.job_stats() == {"a": {"ready": 1, "dead": 1, "completed": 1}, "b": {"ready": 1}}


# -- now and delays ------------------------------------------------------------------------------


def test_a_delay_counts_from_the_drivers_now(driver, clock):
    now = clock.now_ms()
    [late, soon] = driver.job_enqueue([
        NewJob(name="n", queue="default", payload=b"{}", idempotency_key="late", delay_ms=1500.25),
        NewJob(name="n", queue="default", payload=b"{}", idempotency_key="soon", delay_ms=0.0)])
    view = driver.job_get(late.id)
    assert (at(view.run_at), at(view.created_at)) == (now + 1500.25, now)
    assert [j.id for j in claim(driver)] == [soon.id]
    clock.advance(1500)
    assert claim(driver) == []
    clock.advance(0.25)
    assert [j.id for j in claim(driver)] == [late.id]


@pytest.mark.parametrize("delay, run_at", [(math.nan, None), (math.inf, None), (-1.0, None),
                                           (11 * 365 * 86_400_000.0, None), (5.0, 1.8e12)],
                         ids=["nan", "inf", "negative", "past-ten-years", "both"])
def test_a_bad_delay_is_refused_and_writes_nothing(driver, delay, run_at):
    bad = NewJob(name="n", queue="default", payload=b"{}", idempotency_key="bad", delay_ms=delay,
                 run_at_ms=run_at)
    with pytest.raises(InvalidOption) as err:
        driver.job_enqueue([new_job("good"), bad])
    assert err.value.option == "delay"
    assert driver.job_stats() == {}


# -- the server's clock (Postgres only) ----------------------------------------------------------


def _server_ms(driver) -> float:
    with driver.connect() as conn:
        return conn.execute("select extract(epoch from clock_timestamp())::float8 * 1000").fetchone()[0]


@pytest.mark.postgres
def test_a_driver_without_a_clock_takes_now_from_the_server(pg_dsn, pg_schema, clock):
    injected = PostgresDriver(pg_dsn, schema=pg_schema, clock=clock)
    production = PostgresDriver(pg_dsn, schema=pg_schema)
    assert (injected.server_clock, injected.clock) == (False, clock)
    assert (production.server_clock, production.clock) == (True, SYSTEM_CLOCK)
    try:
        production.migrate()
        [job] = production.job_enqueue([new_job("k")])
        before = _server_ms(production)
        [held] = claim(production, lease=30_000)
        after = _server_ms(production)
        view = production.job_get(job.id)
        assert before + 30_000 - 0.001 <= view.lease_expires_at <= after + 30_000 + 0.001
        assert production.job_nack(Nack(held.id, held.token, "boom", delay_ms=60_000))
        assert production.job_get(job.id).run_at >= after + 60_000 - 1
    finally:
        injected.close()
        production.close()


@pytest.mark.postgres
def test_a_worker_whose_clock_runs_ahead_cannot_take_a_live_lease(pg_dsn, pg_schema):
    """Two machines on one database, one an hour fast. Leases, due times and queue ages are all
    measured on the server's clock, so the fast one's sweep finds nothing to rescue, its
    delayed enqueue is not due early, and it reports the queue's age as it is."""
    honest = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=1)
    fast = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=1)
    fast.clock = ManualClock(SYSTEM_CLOCK.now_ms() + 3_600_000)   # what its callers read
    try:
        honest.migrate()
        [mine] = honest.job_enqueue([new_job("mine")])
        [held] = claim(honest, lease=30_000, worker="honest")
        fast.job_enqueue([NewJob(name="n", queue="default", payload=b"{}", idempotency_key="later",
                                 delay_ms=60_000)])
        [waiting] = honest.job_enqueue([new_job("waiting")])
        assert fast.job_rescue() == 0
        assert [j.id for j in claim(fast, worker="fast")] == [waiting.id]
        assert honest.job_heartbeat(held.id, held.token, 30_000) is True
        assert honest.job_get(mine.id).claimed_by == "honest"
        honest.job_enqueue([new_job("fresh")])
        assert 0 <= fast.queue_summary()["default"].oldest_ready_ms < 60_000
    finally:
        honest.close()
        fast.close()


# -- payloads as jsonb gives them back -------------------------------------------------------------


def test_payloads_come_back_as_jsonb_gives_them(driver):
    sent = {"big": 1e16, "bigger": 2.5e20, "digits": 1.2345678901234568e17, "small": 1e-7,
            "zero": -0.0, "half": 0.5, "n": 1, "ü": True, "a": {"bb": None, "b": [1e16, "x"]}}
    job_id = enqueue(driver, "k", payload=sent)
    # keys shorter first (in bytes: "ü" is two), then bytewise
    expected = ('{"a":{"b":[10000000000000000,"x"],"bb":null},"n":1,"ü":true,"big":10000000000000000,'
                '"half":0.5,"zero":0.0,"small":1e-7,"bigger":2.5e+20,"digits":123456789012345680}').encode()
    assert orjson.dumps(claim_one(driver).payload) == expected
    assert orjson.dumps(driver.job_get(job_id).payload) == expected


_json_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=6)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | _json_text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_text, inner, max_size=4),
    max_leaves=12)


@pytest.mark.postgres
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json)
def test_the_memory_driver_stores_payloads_as_jsonb_does(pg_driver, value):
    encoded = encode_payload(value)
    with pg_driver.connect() as conn:
        stored = conn.execute("select %s::text::jsonb", (encoded.decode(),)).fetchone()[0]
    assert orjson.dumps(orjson.loads(as_stored(encoded))) == orjson.dumps(stored)
