"""Conformance, continued: the operator's verbs (cancel, requeue, stats, list, prune), the job
transaction, concurrent callers, names and payloads kept as data, and whose clock a delay and a
lease are measured on.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.drivers.parity import LEASE, at, claim, claim_one, enqueue, new_job, state
from xjobs.clock import SYSTEM_CLOCK, ManualClock
from xjobs.drivers.base import STATES, Enqueued, Lease, ListFilter, Nack, NewJob
from xjobs.drivers.jsonb import as_stored
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.postgres import PostgresDriver
from xjobs.errors import DuplicateJob, InvalidOption, JobNotFound, LeaseLost, NotCancellable, NotRetryable
from xjobs.payload import encode_payload
from xjobs.drivers.base import Claim, WorkerExit


# -- operator verbs ------------------------------------------------------------------------------


@pytest.mark.parametrize("before", ["ready", "suspended"])
def test_cancel_a_waiting_job(driver, clock, before):
    job_id = enqueue(driver, "k")
    if before == "suspended":
        job = claim_one(driver)
        driver.job_nack(Nack(job.id, job.token, "suspended", delay_ms=60_000))
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
    with pytest.raises(JobNotFound) as missing:
        driver.job_cancel(12345)
    assert missing.value.code == "X_JOB_NOT_FOUND"
    with pytest.raises(JobNotFound):
        driver.job_get(12345)
    other = enqueue(driver, "other")
    driver.job_cancel(other)
    with pytest.raises(NotCancellable):
        driver.job_cancel(other)


def test_requeue_runs_a_dead_job_again_from_attempt_zero(driver, clock):
    enqueue(driver, "k", max_attempts=1)
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", error="boom"))
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
    with pytest.raises(DuplicateJob) as held:
        driver.job_requeue(job_id)
    assert held.value.code == "X_JOB_DUPLICATE"
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
    driver.job_nack(Nack(j3.id, j3.token, "dead", error="x"))
    driver.job_nack(Nack(j5.id, j5.token, "suspended", delay_ms=1000))
    driver.job_nack(Nack(j0.id, j0.token, "retried", error="again", delay_ms=1000))
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
    driver.job_nack(Nack(job.id, job.token, "dead", error="x"))

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
    driver.job_nack(Nack(c.id, c.token, "dead", error="x"))
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
    job = other.job_claim(Claim(["default"], 1, LEASE, "w1"))[0]
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
        while jobs := driver.job_claim(Claim(["default"], 3, LEASE, f"w{i}")):
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
    job = driver.job_claim(Claim([text, "default"], 1, LEASE, text))[0]
    assert (job.id, job.name, job.queue, job.tenant, job.payload) == (first, text, text, text, {text: text})
    assert [r.id for r in driver.job_release_worker(WorkerExit(text, how=text))] == [first]
    view = driver.job_get(first)
    assert (view.idempotency_key, view.claimed_by) == (text, text)
    assert view.last_error == f"crashed its worker process ({text}, {text}); attempt counted, runs alone next"
    assert driver.job_cancel(first, reason=text).last_error == text


def test_queue_counts_hold_live_states_and_dead_letters_only(driver, clock):
    from xjobs.drivers.base import Lease, Nack, NewJob
    jobs = [NewJob(name="n", queue=q, payload=b"{}", idempotency_key=str(i), max_attempts=1)
            for i, q in enumerate(["a", "a", "a", "b"])]
    driver.job_enqueue(jobs)
    first, second = driver.job_claim(Claim(["a"], 2, 30_000, "w"))
    driver.job_ack_many([Lease(first.id, first.token)])
    driver.job_nack(Nack(second.id, second.token, "dead", error="boom"))
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
        assert before + 30_000 - 0.001 <= view.lease_expires_at <= after + 30_000 + 0.001  # type: ignore[operator]
        assert production.job_nack(Nack(held.id, held.token, "retried", error="boom", delay_ms=60_000))
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
        assert honest.job_renew(held.id, held.token, 30_000) is True
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


_json_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=6)  # type: ignore[arg-type]
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
