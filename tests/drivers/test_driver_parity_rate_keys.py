"""Rate keys on both drivers (``drivers/rate_keys.py``): fixed windows from the epoch on the
driver's clock, the grant per key in one statement, the claim filter that leaves a full key's
jobs ready, what ``jobs show`` reads, and the prune."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.drivers.parity import at, claim, new_job
from xjobs.drivers.base import Lease, ListFilter, Nack
from xjobs.drivers.fanins import FanOut, NewBatch
from xjobs.drivers.rate_keys import RateAsk, RateGrant, RateKeyStore, RateWait, rate_keys_of

SECOND = 1_000.0


def enqueue_keyed(driver, n: int, key: str = "api-1", *, name: str = "call", first: int = 0) -> list[int]:
    jobs = [new_job(f"{name}-{key}-{first + i}", name=name)._replace(rate_key=key) for i in range(n)]
    return [r.id for r in driver.job_enqueue(jobs)]


def keys(driver) -> RateKeyStore:
    store = rate_keys_of(driver)
    assert store is not None
    return store


def wait_of(driver, job_id: int) -> RateWait:
    wait = keys(driver).rate_key_wait(job_id)
    assert wait is not None
    return wait


def take(driver, jobs, cap: int = 2, period_ms: float = SECOND) -> list[RateGrant]:
    return keys(driver).rate_take([RateAsk(j.id, j.token, cap, period_ms) for j in jobs])


def test_both_drivers_have_the_store_behind_its_door(driver):
    store = rate_keys_of(driver)
    assert store is not None and type(store).__name__ == "CheckedRateKeys"
    assert store.rate_take([]) == []
    with pytest.raises(Exception) as caught:
        store.rate_take([RateAsk(1, 1, 0, SECOND)])
    assert getattr(caught.value, "code", None) == "X_INVALID_OPTION"
    with pytest.raises(Exception) as caught:
        store.rate_take([RateAsk(1, 1, 2, float("nan"))])
    assert getattr(caught.value, "code", None) == "X_INVALID_OPTION"


def test_a_window_grants_its_cap_to_the_first_by_id_and_says_when_it_opens_again(driver, clock):
    clock.advance(250.0)                      # a quarter into a one-second window
    ids = enqueue_keyed(driver, 3)
    jobs = claim(driver, limit=10)
    grants = take(driver, jobs, cap=2)
    assert [(g.job_id, g.granted) for g in grants] == [(ids[0], True), (ids[1], True), (ids[2], False)]
    assert {round(g.next_ms, 3) for g in grants} == {750.0}
    # a granted start is stamped with the grant's time
    assert at(driver.job_get(ids[0]).started_at) == at(clock.now_ms())


def test_keys_and_jobs_are_counted_apart(driver, clock):
    a = enqueue_keyed(driver, 2, "a")
    b = enqueue_keyed(driver, 2, "b")
    other = enqueue_keyed(driver, 1, "a", name="other")
    grants = take(driver, claim(driver, limit=10), cap=1)
    granted = {g.job_id for g in grants if g.granted}
    assert granted == {a[0], b[0], other[0]}


def test_a_second_take_in_the_window_gets_only_what_is_left_and_a_new_window_starts_again(driver, clock):
    enqueue_keyed(driver, 5)
    first = claim(driver, limit=2)
    assert [g.granted for g in take(driver, first, cap=3)] == [True, True]
    second = claim(driver, limit=2)
    assert [g.granted for g in take(driver, second, cap=3)] == [True, False]
    clock.advance(SECOND)
    third = claim(driver, limit=2)
    assert [g.granted for g in take(driver, third, cap=3)] == [True]   # the fifth job; one refused still runs
    assert wait_of(driver, third[0].id).n == 1


def test_a_claim_leaves_a_full_keys_jobs_ready_until_its_window_closes(driver, clock):
    ids = enqueue_keyed(driver, 3)
    plain = driver.job_enqueue([new_job("plain", name="call")])[0].id
    jobs = claim(driver, limit=2)
    assert [g.granted for g in take(driver, jobs, cap=2)] == [True, True]
    # the key's window is full: the third is left where it is, the unrated job is claimed
    assert [j.id for j in claim(driver, limit=10)] == [plain]
    assert driver.job_get(ids[2]).state == "ready"
    wait = wait_of(driver, ids[2])
    assert (wait.key, wait.cap, wait.n) == ("api-1", 2, 2)
    assert wait.until == pytest.approx(clock.now_ms() + SECOND)
    clock.advance(SECOND)
    assert [j.id for j in claim(driver, limit=10)] == [ids[2]]
    assert wait_of(driver, ids[2]).until is None


def test_a_refused_job_shed_to_the_opening_is_not_claimed_before_it_and_keeps_its_attempts(driver, clock):
    ids = enqueue_keyed(driver, 2)
    jobs = claim(driver, limit=10)
    refused = [g for g in take(driver, jobs, cap=1) if not g.granted]
    assert [g.job_id for g in refused] == [ids[1]]
    token = next(j.token for j in jobs if j.id == ids[1])
    assert driver.job_nack(Nack(ids[1], token, "shed", delay_ms=refused[0].next_ms))
    view = driver.job_get(ids[1])
    assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    assert at(view.run_at) == at(clock.now_ms() + SECOND)
    clock.advance(SECOND - 1.0)
    assert claim(driver, limit=10) == []
    clock.advance(1.0)
    assert [j.id for j in claim(driver, limit=10)] == [ids[1]]


def test_a_take_is_fenced_on_the_claim_and_a_job_without_a_key_is_not_answered(driver, clock):
    [keyed] = enqueue_keyed(driver, 1)
    unkeyed = driver.job_enqueue([new_job("free", name="call")])[0].id
    jobs = {j.id: j for j in claim(driver, limit=10)}
    store = keys(driver)
    assert store.rate_take([RateAsk(keyed, jobs[keyed].token + 1, 1, SECOND)]) == []
    assert store.rate_take([RateAsk(unkeyed, jobs[unkeyed].token, 1, SECOND)]) == []
    assert store.rate_key_wait(unkeyed) is None
    assert [g.granted for g in store.rate_take([RateAsk(keyed, jobs[keyed].token, 1, SECOND)])] == [True]


def test_a_changed_period_starts_a_new_window(driver, clock):
    enqueue_keyed(driver, 3)
    jobs = claim(driver, limit=3)
    assert [g.granted for g in take(driver, jobs[:1], cap=1)] == [True]
    # redeployed as 1/1m while the one-second window is full: its count does not carry over
    assert [g.granted for g in take(driver, jobs[1:2], cap=1, period_ms=60_000.0)] == [True]
    assert [g.granted for g in take(driver, jobs[2:], cap=1, period_ms=60_000.0)] == [False]


def test_the_rate_key_rides_the_enqueue_and_the_outbox_document(driver):
    job = new_job("doc", name="call")._replace(rate_key="k-9")
    assert type(job).from_document(job.document()).rate_key == "k-9"
    [done] = driver.job_enqueue([job])
    assert wait_of(driver, done.id).key == "k-9"


def test_windows_closed_long_ago_are_pruned(driver, clock):
    enqueue_keyed(driver, 1, "old")
    take(driver, claim(driver, limit=1), cap=1)
    store = keys(driver)
    assert store.rate_key_prune(60_000.0) == 0
    clock.advance(62_000.0)
    enqueue_keyed(driver, 1, "new")
    take(driver, claim(driver, limit=1), cap=1)
    assert store.rate_key_prune(60_000.0) == 1
    assert store.rate_key_prune(60_000.0) == 0



def test_a_start_claimed_before_its_window_opened_is_stamped_inside_it(driver, clock):
    clock.advance(900.0)
    ids = enqueue_keyed(driver, 2)
    jobs = claim(driver, limit=2)
    claimed_at = clock.now_ms()
    assert [g.granted for g in take(driver, jobs[:1], cap=2)] == [True]
    clock.advance(200.0)                 # the second take reads the next window's clock
    assert [g.granted for g in take(driver, jobs[1:], cap=2)] == [True]
    assert at(driver.job_get(ids[0]).started_at) == at(claimed_at)        # inside its window already
    assert at(driver.job_get(ids[1]).started_at) == at(clock.now_ms())    # moved into the one it counts in
    assert wait_of(driver, ids[1]).n == 1                                 # the new window counts it alone


def test_children_and_a_batch_callback_keep_their_rate_key(driver):
    driver.job_enqueue([new_job("parent", name="parent")])
    [held] = claim(driver, limit=1)
    kids = [new_job(f"c{i}", name="call")._replace(rate_key=f"kid-{i}") for i in range(2)]
    assert driver.fanins.fanin_open(Lease(held.id, held.token), FanOut("fan", 1, 2, [kids])).suspended
    children = sorted(j.id for j in driver.job_list(ListFilter(name="call")))
    assert [wait_of(driver, c).key for c in children] == ["kid-0", "kid-1"]
    callback = new_job("cb", name="callback")._replace(rate_key="cb-key")
    opened = driver.fanins.batch_open(NewBatch(1, [[new_job("m", name="member")._replace(rate_key="m-key")]],
                                               callback))
    assert [wait_of(driver, i).key for i in (opened.callback_id, *opened.member_ids)] == ["cb-key", "m-key"]
