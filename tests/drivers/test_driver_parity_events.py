"""Conformance of the event bus on both drivers: a wait that parks its job until its event (or
its timeout), events delivered to every waiter and never consumed, sends inside a caller's or a
job's transaction, and event prune.

Every test runs against the memory and the Postgres driver on the shared ManualClock; the
expected values are spelled out, so the parity is that both pass the same assertions.
"""

from __future__ import annotations

import pytest

from tests.drivers.parity import (LEASE, at, claim, new_job, outcome, parked, reclaim, run, send, sleep,
                                  step, wait)
from xjobs.drivers.base import LATEST_MS, Lease, NewEvent, StepWait
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.sql import statements
from xjobs.errors import InvalidOption, LeaseLost
from xjobs.drivers.base import Claim


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
    job = other.job_claim(Claim(["default"], 1, LEASE, "w1"))[0]
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
