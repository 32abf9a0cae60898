"""Conformance of fair claims on both drivers (``driver.fair``): a claim shares its limit among
the keys with due work in a stride rotation (weights give a key more turns), a key that gets
work joins at the lowest pass, a key whose turn finds nothing due goes behind the others, one
with no ready row left leaves the rotation, and every way back to ready (a retry, a rescue, a
requeue) brings a key back."""

from __future__ import annotations

from tests.drivers.parity import LEASE, new_job
from xjobs.drivers.base import Nack
from xjobs.drivers.fair import FairClaim
from xjobs.drivers.records import NewJob


def keyed(key: str, n: int, *, start: int = 0, queue: str = "default", **kw) -> list[NewJob]:
    jobs = [new_job(f"{key}-{i}", queue=queue, tenant=key, **kw) for i in range(start, start + n)]
    return [j._replace(fair_key=key) for j in jobs]


def fair(driver, limit: int = 3, *, weights=None, names=None, queue: str = "default"):
    return driver.fair.job_claim_fair(FairClaim(queue, limit, LEASE, "w1", weights, names))


def tenants(jobs) -> list[str]:
    return [j.tenant for j in sorted(jobs, key=lambda j: j.id)]


def test_a_claim_shares_its_limit_among_the_keys_with_due_work(driver):
    driver.job_enqueue(keyed("a", 10))
    driver.job_enqueue(keyed("b", 2) + keyed("c", 2))
    first = fair(driver, 3)
    assert sorted(tenants(first)) == ["a", "b", "c"]
    second = fair(driver, 3)
    assert sorted(tenants(second)) == ["a", "b", "c"]
    # b and c are drained: a alone fills every slot, its own oldest first
    third = fair(driver, 3)
    assert tenants(third) == ["a", "a", "a"]
    assert [j.payload["key"] for j in sorted(third, key=lambda j: j.id)] == ["a-2", "a-3", "a-4"]
    assert [k for k, _ in driver.fair.fair_turns("default")] == ["a"]


def test_a_key_that_gets_work_is_served_before_the_backlog_of_the_others(driver):
    driver.job_enqueue(keyed("a", 50))
    assert tenants(fair(driver, 4)) == ["a"] * 4
    driver.job_enqueue(keyed("b", 1))
    # b joins at the lowest pass (a's, and ties go by key): the next turn of the rotation has it
    assert driver.fair.fair_turns("default") == [("a", 4.0), ("b", 4.0)]
    assert tenants(fair(driver, 1)) + tenants(fair(driver, 1)) == ["a", "b"]
    assert tenants(fair(driver, 2)) == ["a", "a"]   # the rest of the backlog is a's alone


def test_weights_give_a_key_more_turns(driver):
    driver.job_enqueue(keyed("a", 30) + keyed("b", 30))
    got: list[str] = []
    for _ in range(6):
        got += tenants(fair(driver, 2, weights={"a": 3.0}))
    assert (got.count("a"), got.count("b")) == (9, 3)
    assert driver.fair.fair_turns("default") == [("a", 3.0), ("b", 3.0)]


def test_a_key_whose_turn_finds_nothing_due_goes_behind_and_one_with_nothing_left_leaves(driver, clock):
    driver.job_enqueue(keyed("later", 1, run_at_ms=clock.now_ms() + 60_000.0))
    driver.job_enqueue(keyed("now", 3))
    assert tenants(fair(driver, 1)) == ["now"]
    turns = dict(driver.fair.fair_turns("default"))
    assert turns["later"] > turns["now"]          # passed over, not forgotten: it has a ready row
    clock.advance(61_000.0)
    got = tenants(fair(driver, 5))
    assert sorted(got) == ["later", "now", "now"]
    assert fair(driver, 5) == []
    assert driver.fair.fair_turns("default") == []   # neither has a ready row left


def test_every_way_back_to_ready_brings_a_key_back(driver, clock):
    driver.job_enqueue(keyed("a", 1))
    [job] = fair(driver, 1)
    assert fair(driver, 1) == [] and driver.fair.fair_turns("default") == []
    assert driver.job_nack(Nack(job.id, job.token, "retried", error="flaky", delay_ms=0.0))
    [again] = fair(driver, 1)
    assert again.id == job.id and again.attempt == 2
    assert driver.job_nack(Nack(again.id, again.token, "dead", error="gone"))
    assert fair(driver, 1) == []
    driver.job_requeue(job.id)
    [third] = fair(driver, 1)
    assert third.id == job.id
    clock.advance(LEASE + 1.0)
    assert driver.job_rescue() == 1
    assert [j.id for j in fair(driver, 1)] == [job.id]


def test_a_fair_claim_respects_pause_names_and_other_queues(driver):
    driver.job_enqueue(keyed("a", 2) + keyed("b", 2, name="other") + keyed("c", 1, queue="elsewhere"))
    driver.queue_pause("default", True)
    assert fair(driver, 5) == []
    driver.queue_pause("default", False)
    assert tenants(fair(driver, 5, names=["send"])) == ["a", "a"]
    assert fair(driver, 5, names=["send"]) == []
    assert [k for k, _ in driver.fair.fair_turns("default")] == ["b"]   # passed over, still ready
    assert tenants(fair(driver, 5, queue="elsewhere")) == ["c"]


def test_within_one_key_the_claim_order_is_priority_then_age(driver):
    driver.job_enqueue(keyed("a", 2) + keyed("a", 1, start=2, priority=-5))
    got = fair(driver, 3)
    assert [j.payload["key"] for j in sorted(got, key=lambda j: (j.priority, j.id))] == ["a-2", "a-0", "a-1"]


def test_a_fair_row_is_claimed_by_a_plain_claim_too_and_leaves_the_rotation_in_step(driver):
    from tests.drivers.parity import claim
    driver.job_enqueue(keyed("a", 2))
    assert len(claim(driver, limit=10)) == 2
    assert fair(driver, 2) == [] and driver.fair.fair_turns("default") == []


def test_fair_place_tells_where_a_due_job_stands_in_its_key_and_the_rotation(driver, clock):
    from xjobs.drivers.fair import FairPlace
    ids = [e.id for e in driver.job_enqueue(keyed("a", 3) + keyed("b", 2) + keyed("c", 1))]
    assert tenants(fair(driver, 1)) == ["a"]           # a moves on by one turn: b and c are before it now
    a1, a2, b0, b1, c0 = ids[1], ids[2], ids[3], ids[4], ids[5]
    assert driver.fair.fair_place(a2) == FairPlace("a", 1, 2, 3)     # a-1 before it; b and c before a
    assert driver.fair.fair_place(b1) == FairPlace("b", 1, 0, 3)
    assert driver.fair.fair_place(c0) == FairPlace("c", 0, 1, 3)
    urgent = driver.job_enqueue(keyed("a", 1, start=9, priority=-1))[0].id
    assert driver.fair.fair_place(a1) == FairPlace("a", 1, 2, 3)     # priority orders a key's line
    assert driver.fair.fair_place(urgent) == FairPlace("a", 0, 2, 3)
    later = driver.job_enqueue(keyed("d", 1, run_at_ms=clock.now_ms() + 60_000.0))[0].id
    plain_job = driver.job_enqueue([new_job("plain", tenant="d")])[0].id
    # not due, no key, not ready, or no job: nothing to tell
    assert [driver.fair.fair_place(i) for i in (later, plain_job, ids[0], 10**12, -1)] == [None] * 5
    assert driver.fair.fair_place(b0).keys == 4                      # d joined the rotation, due or not
