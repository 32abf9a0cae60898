"""Conformance of concurrency by key on both drivers (migration 14 and ``memory_keyed.py``): at
most ``key_cap`` members of one (job, key) hold a place, the rest wait suspended and are never
claimed; a place is let go by the statement that settles its holder, which lets the next waiter
in, in id order; a sequence's dead member keeps its place ("hold") until it is retried or
cancelled, or lets the next one in ("skip")."""

from __future__ import annotations

import dataclasses

from tests.drivers.parity import LEASE, claim, new_job, send, wait
from xjobs.drivers.base import LATEST_MS, Batch, Lease, ListFilter, Nack, NackOutcome, NewJob


def member(key: str, account: str = "a", *, cap: int = 2, hold: bool = False, name: str = "sync",
           run_at_ms: float | None = None) -> NewJob:
    return new_job(key, name=name, run_at_ms=run_at_ms)._replace(concurrency_key=account,
                               key_cap=cap, key_hold=hold)


def enqueue(driver, *jobs: NewJob) -> list[int]:
    return [r.id for r in driver.job_enqueue(list(jobs))]


def claimed(driver, limit: int = 50) -> dict[int, Lease]:
    return {j.id: Lease(j.id, j.token) for j in claim(driver, limit=limit)}


def states(driver, ids: list[int]) -> list[str]:
    return [driver.job_get(i).state for i in ids]


def nack(driver, lease: Lease, outcome: NackOutcome, delay_ms: float = 0.0) -> None:
    assert driver.job_nack_many([Nack(lease.job_id, lease.token, outcome, "boom", delay_ms)]) == {lease.job_id}


def test_at_most_cap_members_of_a_key_are_claimable_and_the_rest_wait(driver):
    a = enqueue(driver, *(member(f"a{i}") for i in range(5)))
    b = enqueue(driver, member("b0", "b"))
    unkeyed = enqueue(driver, new_job("plain", name="sync"))
    assert states(driver, a) == ["ready", "ready", "suspended", "suspended", "suspended"]
    got = claimed(driver)
    assert sorted(got) == sorted(a[:2] + b + unkeyed)
    assert claimed(driver) == {}                        # nothing else: no waiter is ever claimed
    waiting = driver.job_get(a[2])
    assert waiting.run_at == LATEST_MS and waiting.key is not None
    assert (waiting.key.key, waiting.key.cap, waiting.key.waiting, waiting.key.holders) == ("a", 2, True, tuple(a[:2]))
    assert driver.job_get(a[0]).key.waiting is False
    assert driver.job_get(unkeyed[0]).key is None


def test_a_settled_holder_lets_the_next_waiter_in_at_once_in_id_order(driver, clock):
    a = enqueue(driver, *(member(f"a{i}", run_at_ms=clock.now_ms()) for i in range(4)))
    held = claimed(driver)
    assert driver.job_ack(a[1], held[a[1]].token)
    nxt = driver.job_get(a[2])
    assert nxt.state == "ready" and nxt.run_at == driver.job_get(a[0]).run_at   # its own run_at back
    assert list(claimed(driver)) == [a[2]]
    nack(driver, held[a[0]], "dead")                     # not ordered: a dead member lets go
    assert list(claimed(driver)) == [a[3]]


def test_a_retrying_member_keeps_its_place_until_it_settles(driver, clock):
    a = enqueue(driver, *(member(f"a{i}", cap=1) for i in range(2)))
    nack(driver, claimed(driver)[a[0]], "retried", delay_ms=1_000)
    assert states(driver, a) == ["ready", "suspended"]
    clock.advance(1_001)
    again = claimed(driver)
    assert list(again) == [a[0]]
    assert driver.job_ack(a[0], again[a[0]].token)
    assert list(claimed(driver)) == [a[1]]


def test_a_dead_member_of_a_held_sequence_holds_it_until_it_is_cancelled(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=1, hold=True) for i in range(3)))
    nack(driver, claimed(driver)[a[0]], "dead")
    assert states(driver, a) == ["dead", "suspended", "suspended"]
    assert claimed(driver) == {}
    assert driver.job_get(a[1]).key.holders == (a[0],)
    assert driver.job_cancel(a[0], "give up").state == "cancelled"   # a held dead member can be cancelled
    assert states(driver, a) == ["cancelled", "ready", "suspended"]
    assert list(claimed(driver)) == [a[1]]


def test_a_held_dead_member_retried_runs_again_first(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=1, hold=True) for i in range(2)))
    nack(driver, claimed(driver)[a[0]], "dead")
    assert driver.job_requeue(a[0], "again").state == "ready"      # it kept its place
    assert list(claimed(driver)) == [a[0]]
    assert states(driver, a) == ["running", "suspended"]


def test_a_skipping_sequence_lets_the_next_member_in_when_one_dies(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=1) for i in range(2)))
    nack(driver, claimed(driver)[a[0]], "dead")
    assert list(claimed(driver)) == [a[1]]


def test_a_requeued_member_waits_for_its_key_again(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=1) for i in range(3)))
    first = claimed(driver)
    assert driver.job_cancel(a[1], "not now").state == "cancelled"   # a waiter: nothing let in
    assert states(driver, a) == ["running", "cancelled", "suspended"]
    assert driver.job_requeue(a[1], "after all").state == "suspended"   # back in line, by its id
    assert driver.job_ack(a[0], first[a[0]].token)
    assert states(driver, a) == ["completed", "ready", "suspended"]


def test_keys_are_per_job_name_and_a_deduplicated_enqueue_takes_no_place(driver):
    one = enqueue(driver, member("x", cap=1), member("y", cap=1, name="other"))
    assert states(driver, one) == ["ready", "ready"]
    [again] = driver.job_enqueue([member("x", cap=1)])
    assert again.deduped and again.id == one[0]
    later = enqueue(driver, member("z", cap=1))
    assert states(driver, later) == ["suspended"]


def test_a_cancelled_holder_and_a_pruned_one_let_the_next_in(driver, clock):
    a = enqueue(driver, *(member(f"a{i}", cap=1, hold=True) for i in range(3)))
    assert driver.job_cancel(a[0], "stop").state == "cancelled"
    assert states(driver, a) == ["cancelled", "ready", "suspended"]
    nack(driver, claimed(driver)[a[1]], "dead")                       # holds the sequence
    clock.advance(40 * 86_400_000)
    driver.job_prune(86_400_000, 86_400_000)
    assert driver.job_get(a[2]).state == "ready"                      # its holder's retention passed


def test_a_bulk_cancel_of_the_holders_lets_the_waiters_in(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=2) for i in range(4)))
    ids = driver.job_cancel_batch(Batch(ListFilter(state="ready"), 0, a[-1], 10), "all of them")
    assert sorted(ids) == a[:2]
    assert states(driver, a) == ["cancelled", "cancelled", "ready", "ready"]


def test_a_keyed_job_lapsed_and_rescued_keeps_its_place(driver, clock):
    a = enqueue(driver, *(member(f"a{i}", cap=1) for i in range(2)))
    claimed(driver)
    clock.advance(LEASE + 1)
    driver.job_rescue()
    assert states(driver, a) == ["ready", "suspended"]


def test_a_member_staged_in_the_outbox_keeps_its_key():
    staged = member("o1", cap=1, hold=True)
    assert NewJob.from_document(staged.document() | {"p": {"key": "o1"}}) == staged


def test_only_its_key_lets_a_waiting_member_in_whatever_else_would_wake_it(driver):
    a = enqueue(driver, *(member(f"a{i}", cap=1) for i in range(2)))
    lease = claimed(driver)[a[0]]
    assert wait(driver, lease, "paid", "paid", "o1").done is False        # suspended in a wait: still a holder
    assert driver.job_cancel(a[0], "stop").state == "cancelled"           # lets the next one in
    assert driver.job_requeue(a[0], "again").state == "suspended"         # and waits behind it
    send(driver, "paid", "o1", {"ok": True})                              # its old wait's event
    assert driver.job_get(a[0]).state == "suspended" and driver.job_get(a[0]).run_at == LATEST_MS
    assert driver.job_get(a[0]).key.waiting
    assert driver.job_ack(a[1], claimed(driver)[a[1]].token)
    assert states(driver, a) == ["ready", "completed"]
