"""Conformance of fan-ins on both drivers (``driver.fanins``): a parent's fan-out inserts its
children once and parks the parent, each child's settlement counts down in the statement that
settles it, the last one wakes the parent once; a cancel cascades down the tree; a batch wakes
its callback once with the counts merged into its input."""

from __future__ import annotations

from typing import Any

import orjson

from tests.drivers.parity import claim, enqueue, new_job, run, state
from xjobs.drivers.base import Lease, Nack
from xjobs.drivers.fanins import FanOut, NewBatch


def fan(name: str, n: int, *, job: str = "child", attempt: int = 1) -> FanOut:
    jobs = [new_job(f"ignored-{i}", name=job, payload={"i": i}) for i in range(n)]
    return FanOut(name=name, attempt=attempt, total=n, chunks=[jobs[:2], jobs[2:]])


def children_of(driver, parent: int) -> list[int]:
    return [c.id for c in driver.fanins.job_children(parent, 100).first]


_held: dict[tuple[int, int], Any] = {}


def take(driver, job_id: int):
    """The claim of ``job_id``: everything ready is claimed, and kept for later takes."""
    for job in claim(driver, limit=100):
        _held[(id(driver), job.id)] = job
    return _held.pop((id(driver), job_id))


def settle(driver, ids: list[int], outcome: str = "completed") -> None:
    for job_id in ids:
        job = take(driver, job_id)
        if outcome == "completed":
            assert driver.job_ack(job.id, job.token)
        else:
            assert driver.job_nack(Nack(job.id, job.token, "dead", error="boom"))


def test_a_fan_out_parks_its_parent_and_the_last_child_wakes_it_once(driver, clock):
    parent, lease = run(driver, "parent", name="parent")
    opened = driver.fanins.fanin_open(lease, fan("thumbs", 3))
    assert (opened.suspended, opened.fenced, opened.members) == (True, False, None)
    assert state(driver, parent) == "suspended" and driver.job_get(parent).attempt == 0
    kids = children_of(driver, parent)
    assert len(kids) == 3
    # the child's key is derived from the parent and the step, whatever its job would say
    assert [driver.job_get(k).idempotency_key for k in kids] == [f"child:{parent}:thumbs:{i}" for i in range(3)]
    view = driver.fanins.fanin_get(opened.fanin_id)
    assert (view.parent_id, view.step, view.waiter_id, view.total, view.pending) == (parent, "thumbs", parent, 3, 3)
    settle(driver, kids[:2])
    assert state(driver, parent) == "suspended"
    assert driver.fanins.fanin_get(opened.fanin_id).pending == 1
    settle(driver, kids[2:], "dead")
    assert state(driver, parent) == "ready"
    view = driver.fanins.fanin_get(opened.fanin_id)
    assert (view.pending, view.completed, view.dead, view.cancelled, view.woken) == (0, 2, 1, 0, 1)
    # the replay: the same fan-in, no new child, the members in input order
    job = take(driver, parent)
    again = driver.fanins.fanin_open(Lease(job.id, job.token), fan("thumbs", 3, attempt=job.attempt))
    assert again.fanin_id == opened.fanin_id and not again.suspended
    assert [(m.index, m.id, m.state) for m in again.members] == [
        (0, kids[0], "completed"), (1, kids[1], "completed"), (2, kids[2], "dead")]
    assert again.members[2].error == "boom"
    assert children_of(driver, parent) == kids
    assert driver.fanins.fanin_complete(Lease(job.id, job.token), "thumbs", job.attempt, orjson.dumps({"r": 1}))
    done = driver.fanins.fanin_open(Lease(job.id, job.token), fan("thumbs", 3))
    assert (done.completed, done.value) == (True, {"r": 1})


def test_a_fan_out_of_nothing_answers_at_once_and_a_lost_claim_writes_nothing(driver, clock):
    parent, lease = run(driver, "parent", name="parent")
    empty = driver.fanins.fanin_open(lease, FanOut("none", 1, 0, []))
    assert (empty.suspended, empty.members) == (False, ())
    assert state(driver, parent) == "running"
    fenced = driver.fanins.fanin_open(Lease(parent, lease.token + 1), fan("other", 3))
    assert fenced.fenced and children_of(driver, parent) == []


def test_a_cancel_cascades_down_a_three_level_tree(driver, clock):
    root, lease = run(driver, "root", name="root")
    driver.fanins.fanin_open(lease, fan("level1", 2))
    level1 = children_of(driver, root)
    mid = take(driver, level1[0])
    driver.fanins.fanin_open(Lease(mid.id, mid.token), fan("level2", 3, job="leaf"))
    leaves = children_of(driver, mid.id)
    running_leaf = take(driver, leaves[0])
    settle(driver, [leaves[1]])
    driver.job_cancel(root, "stop")
    assert state(driver, root) == "cancelled"
    assert [state(driver, j) for j in level1] == ["cancelled", "cancelled"]
    assert [state(driver, j) for j in leaves] == ["cancelled", "completed", "cancelled"]
    assert driver.job_get(leaves[2]).last_error == f"cancelled with its parent job {mid.id}"
    # the running leaf lost its job: its ack writes nothing
    assert not driver.job_ack(running_leaf.id, running_leaf.token)
    counts = driver.fanins.job_children(mid.id, 10).counts
    assert counts == {"cancelled": 2, "completed": 1}


def test_a_batch_wakes_its_callback_once_with_the_counts(driver, clock):
    members = [new_job(f"m{i}", name="member", payload={"i": i}) for i in range(4)]
    callback = new_job("cb", name="notify", payload={"input": {"to": "ops"}})
    opened = driver.fanins.batch_open(NewBatch(total=4, chunks=[members[:3], members[3:]], callback=callback))
    assert state(driver, opened.callback_id) == "suspended" and len(opened.member_ids) == 4
    ids = list(opened.member_ids)
    settle(driver, ids[:2])
    settle(driver, ids[2:3], "dead")
    assert state(driver, opened.callback_id) == "suspended"
    driver.job_cancel(ids[3])
    assert state(driver, opened.callback_id) == "ready"
    payload = driver.job_get(opened.callback_id).payload
    assert payload == {"input": {"to": "ops"}, "batch_id": opened.id, "completed": 2, "dead": 1, "cancelled": 1,
                       "completed_ids": ids[:2], "dead_ids": [ids[2]], "cancelled_ids": [ids[3]]}
    assert driver.fanins.fanin_get(opened.id).woken == 1
    empty = driver.fanins.batch_open(NewBatch(total=0, chunks=[], callback=new_job("cb2", name="notify")))
    assert state(driver, empty.callback_id) == "ready"


def test_a_requeued_dead_child_counts_again(driver, clock):
    enqueue(driver, "unrelated")
    parent, lease = run(driver, "parent", name="parent")
    driver.fanins.fanin_open(lease, fan("one", 1))
    [kid] = children_of(driver, parent)
    settle(driver, [kid], "dead")
    fanin = driver.fanins.fanin_get(1) or driver.fanins.fanin_get(2)
    assert fanin is not None
    driver.job_requeue(kid)
    assert driver.fanins.job_children(parent, 10).counts == {"ready": 1}


def test_a_retry_from_the_map_step_finds_the_same_children_and_their_results(driver, clock):
    parent, lease = run(driver, "parent", name="parent")
    driver.fanins.fanin_open(lease, fan("thumbs", 3))
    kids = children_of(driver, parent)
    settle(driver, kids)
    job = take(driver, parent)
    members = driver.fanins.fanin_open(Lease(job.id, job.token), fan("thumbs", 3)).members
    assert driver.fanins.fanin_complete(Lease(job.id, job.token), "thumbs", 1, orjson.dumps({"r": 1}))
    assert driver.job_ack(job.id, job.token)
    driver.step_reopen(parent, "thumbs")
    again = take(driver, parent)
    replayed = driver.fanins.fanin_open(Lease(again.id, again.token), fan("thumbs", 3))
    assert not replayed.suspended and replayed.members == members
    assert children_of(driver, parent) == kids


def test_a_fan_in_is_pruned_with_the_job_it_wakes(driver, clock):
    parent, lease = run(driver, "parent", name="parent")
    opened = driver.fanins.fanin_open(lease, fan("thumbs", 1))
    settle(driver, children_of(driver, parent))
    job = take(driver, parent)
    assert driver.job_ack(job.id, job.token)
    clock.advance(10_000)
    assert driver.job_prune(1000, 1000, 100) == 2
    assert driver.fanins.fanin_get(opened.fanin_id) is None
    assert driver.fanins.job_parent(parent) is None
