"""Conformance of the coordination nouns on both drivers: the leader lease row, dispatches
fenced on it with a compare-and-set watermark, the outbox's claim-as-a-lease and its fenced
publish and release, and fleet-wide job slots."""

from __future__ import annotations

import orjson
import pytest

from tests.drivers.parity import claim as claim_jobs
from xjobs.drivers.base import Claim, Dispatch, ListFilter, NewJob, OutboxClaim, Slot, SlotRequest, WorkerExit
from xjobs.errors import InvalidOption


def claim(driver):
    """Claim every ready job of the default queue; answers them as their keys (the payloads)."""
    return [_Key(j.payload["k"]) for j in claim_jobs(driver)]


class _Key:
    def __init__(self, key: str) -> None:
        self.idempotency_key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and other.idempotency_key == self.idempotency_key


def job(key: str, name: str = "tick", queue: str = "default") -> NewJob:
    return NewJob(name=name, queue=queue, payload=orjson.dumps({"k": key}), idempotency_key=key)


# -- the leader --------------------------------------------------------------------------------------


def test_one_leader_at_a_time_renewals_and_takeover_after_expiry(driver, clock):
    assert driver.leader_get("scheduler") is None
    assert driver.leader_elect("scheduler", "a", 1000) is True
    assert driver.leader_elect("scheduler", "b", 1000) is False       # a holds it
    clock.advance(600)
    assert driver.leader_elect("scheduler", "a", 1000) is True        # a renews
    clock.advance(600)
    assert driver.leader_elect("scheduler", "b", 1000) is False       # a's renewal still holds
    clock.advance(500)
    assert driver.leader_elect("scheduler", "b", 1000) is True        # expired: b takes over
    view = driver.leader_get("scheduler")
    assert (view.holder, view.live) == ("b", True)
    assert driver.leader_resign("scheduler", "a") is False            # not a's to give back
    assert driver.leader_resign("scheduler", "b") is True
    assert driver.leader_get("scheduler").live is False
    assert driver.leader_elect("scheduler", "a", 1000) is True        # handed back: no wait


def test_a_dispatch_is_fenced_on_the_lease_and_the_watermark(driver, clock):
    driver.leader_elect("scheduler", "a", 1000)
    first = Dispatch("scheduler", "a", "nightly", None, 1000, (job("t:1"),))
    [made] = driver.schedule_dispatch(first)
    assert not made.deduped
    [mark] = driver.schedule_state()
    assert (mark.task, mark.watermark_ms, mark.dispatched) == ("nightly", 1000, 1)
    # a second dispatcher that read the same watermark (None) is fenced out: nothing enqueued
    assert driver.schedule_dispatch(Dispatch("scheduler", "a", "nightly", None, 1000, (job("t:x"),))) is None
    assert driver.schedule_dispatch(Dispatch("scheduler", "a", "nightly", 999, 2000, (job("t:y"),))) is None
    assert [j.idempotency_key for j in claim(driver)] == ["t:1"]
    # a holder that lost the lease (expired, then taken) commits nothing
    clock.advance(1001)
    assert driver.leader_elect("scheduler", "b", 1000) is True
    assert driver.schedule_dispatch(Dispatch("scheduler", "a", "nightly", 1000, 2000, (job("t:2"),))) is None
    assert driver.schedule_state()[0].watermark_ms == 1000
    assert driver.schedule_dispatch(Dispatch("scheduler", "b", "nightly", 1000, 2000, (job("t:2"),))) is not None
    assert driver.schedule_state()[0].watermark_ms == 2000
    assert isinstance(driver.clock_now_ms(), float)


def test_an_occurrence_dispatched_twice_while_its_job_lives_is_one_job(driver):
    driver.leader_elect("scheduler", "a", 60_000)
    [one] = driver.schedule_dispatch(Dispatch("scheduler", "a", "t", None, 1, (job("task:t:1:k"),)))
    [two] = driver.schedule_dispatch(Dispatch("scheduler", "a", "t", 1, 2, (job("task:t:1:k"),)))
    assert (two.id, two.deduped) == (one.id, True)


@pytest.mark.parametrize("call", [
    lambda d: d.leader_elect("scheduler", "a", 0),
    lambda d: d.leader_elect("", "a", 1000),
    lambda d: d.leader_elect("scheduler", "bad\nholder", 1000),
    lambda d: d.schedule_dispatch(Dispatch("scheduler", "a", "t", None, 1.5)),  # type: ignore[arg-type]
    lambda d: d.outbox_claim("relay", -1, 1000),
    lambda d: d.outbox_claim("relay", 10, float("nan")),
    lambda d: d.outbox_publish(OutboxClaim(None, "relay", (1,), (job("k"),))),  # type: ignore[arg-type]
    lambda d: d.outbox_release(OutboxClaim(0, "relay", (1,), (job("k"),))),
    lambda d: d.slot_acquire(SlotRequest("capped", 0, "w", 1000)),
    lambda d: d.slot_renew(Slot("capped", -1, "w"), 1000),
    lambda d: d.job_claim(Claim(["default"], 1, 1000, "w", caps={"capped": float("inf")})),  # type: ignore[dict-item]
], ids=["lease-zero", "election-empty", "holder-control", "watermark-fraction", "claim-negative",
        "claim-lease-nan", "publish-no-token", "release-zero-token", "cap-zero", "slot-negative",
        "caps-inf"])
def test_coordination_refusals_are_alike(driver, call):
    with pytest.raises(InvalidOption):
        call(driver)


# -- the outbox --------------------------------------------------------------------------------------


def test_outbox_rows_are_claimed_in_order_and_published_once(driver, clock):
    staged = driver.outbox_stage([job("a"), job("b"), job("c")], None)
    assert driver.outbox_summary().pending == 3
    first = driver.outbox_claim("relay-1", 2, 1000)
    assert (first.ids, [j.idempotency_key for j in first.jobs]) == (tuple(staged[:2]), ["a", "b"])
    second = driver.outbox_claim("relay-2", 10, 1000)
    assert second.ids == (staged[2],)                    # the first two are held by relay-1
    made = driver.outbox_publish(first)
    assert [e.deduped for e in made] == [False, False]
    assert driver.outbox_publish(first) is None          # published once: a second publish marks nothing
    assert driver.outbox_summary().pending == 1
    assert sorted(j.idempotency_key for j in claim(driver)) == ["a", "b"]
    assert driver.outbox_claim("relay-3", 10, 1000).ids == ()   # c is relay-2's until its lease ends


def test_a_stalled_relay_can_neither_publish_nor_release_what_another_now_holds(driver, clock):
    [staged] = driver.outbox_stage([job("a")], None)
    stale = driver.outbox_claim("relay-1", 10, 1000)
    clock.advance(1001)                                  # relay-1 stalled past its lease
    fresh = driver.outbox_claim("relay-2", 10, 1000)
    assert fresh.ids == (staged,)
    assert driver.outbox_release(stale) == 0
    assert driver.outbox_publish(stale) is None          # nothing enqueued either (one transaction)
    assert claim(driver) == []
    assert driver.outbox_release(fresh) == 1             # a failed publish hands the batch back
    again = driver.outbox_claim("relay-3", 10, 1000)
    assert again.ids == (staged,)
    assert len(driver.outbox_publish(again)) == 1
    assert [j.idempotency_key for j in claim(driver)] == ["a"]


def test_a_staged_delay_counts_from_the_staging_not_the_publish(driver, clock):
    staged_at = clock.now_ms()
    driver.outbox_stage([NewJob(name="tick", queue="default", payload=b"{}", idempotency_key="later",
                                delay_ms=60_000)], None)
    clock.advance(45_000)                                # the relay was away for 45 s
    driver.outbox_publish(driver.outbox_claim("relay", 10, 1000))
    [view] = driver.job_list(ListFilter(limit=10))
    assert round(driver.job_get(view.id).run_at) == staged_at + 60_000   # epoch ms


def test_published_rows_are_pruned_after_their_retention(driver, clock):
    driver.outbox_stage([job("a"), job("b")], None)
    batch = driver.outbox_claim("relay", 10, 1000)
    driver.outbox_publish(batch)
    assert driver.outbox_prune(60_000, 100) == 0
    clock.advance(60_001)
    assert driver.outbox_prune(60_000, 1) == 1 and driver.outbox_prune(60_000, 100) == 1
    assert driver.outbox_summary().pending == 0


# -- job slots ---------------------------------------------------------------------------------------


def test_slots_are_granted_up_to_the_cap_renewed_by_their_holder_and_freed(driver, clock):
    assert [driver.slot_acquire(SlotRequest("capped", 3, f"w{i}", 1000)) for i in range(4)] == [0, 1, 2, None]
    assert driver.slot_held() == {"capped": 3}
    clock.advance(500)
    assert driver.slot_renew(Slot("capped", 1, "w1"), 1000) is True
    assert driver.slot_renew(Slot("capped", 1, "w2"), 1000) is False       # not its holder
    assert driver.slot_release(Slot("capped", 0, "w0")) is True
    assert driver.slot_acquire(SlotRequest("capped", 3, "w4", 1000)) == 0
    clock.advance(600)                                               # w2 never renewed
    assert driver.slot_renew(Slot("capped", 2, "w2"), 1000) is False       # expired: fenced on expiry too
    assert driver.slot_held() == {"capped": 2}
    assert driver.slot_acquire(SlotRequest("capped", 3, "w5", 1000)) == 2         # its expired slot is free again


def test_a_claim_leaves_a_capped_job_whose_slots_are_all_held(driver):
    [a], [b] = (driver.job_enqueue([job(key, name="capped")]) for key in ("a", "b"))
    driver.job_enqueue([job("c", name="free")])
    driver.slot_acquire(SlotRequest("capped", 1, "elsewhere", 60_000))
    got = driver.job_claim(Claim(["default"], 10, 1000, "w", caps={"capped": 1}))
    assert [j.name for j in got] == ["free"]
    driver.slot_release(Slot("capped", 0, "elsewhere"))
    # no more of a capped job than it has free slots: the other stays ready, not claimed to be shed
    assert [j.id for j in driver.job_claim(Claim(["default"], 10, 1000, "w", caps={"capped": 1}))] == [a.id]
    # the claim filters on slots HELD; taking one is the worker's admission, so b is claimable
    assert [j.id for j in driver.job_claim(Claim(["default"], 10, 1000, "w", caps={"capped": 1}))] == [b.id]


def test_a_claim_takes_a_capped_job_up_to_its_free_slots_and_everything_else(driver):
    capped = driver.job_enqueue([job(f"c{n}", name="capped") for n in range(5)])
    free = driver.job_enqueue([job(f"f{n}", name="free") for n in range(3)])
    driver.slot_acquire(SlotRequest("capped", 3, "elsewhere", 60_000))
    got = driver.job_claim(Claim(["default"], 10, 1000, "w", caps={"capped": 3}))
    assert sorted(j.id for j in got) == sorted([capped[0].id, capped[1].id] + [e.id for e in free])


def test_a_dead_workers_slots_are_freed_with_its_jobs(driver):
    assert driver.slot_acquire(SlotRequest("capped", 1, "w1", 60_000)) == 0
    driver.job_release_worker(WorkerExit("w1", crashed=True))
    assert driver.slot_held() == {} and driver.slot_acquire(SlotRequest("capped", 1, "w2", 60_000)) == 0
