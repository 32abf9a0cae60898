"""Conformance, continued: keys kept after completion (dedupe windows), queue pause, progress
reports, operator filters and the bulk verbs' batches, against the memory and Postgres drivers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.drivers.parity import LEASE, at, claim, claim_one, enqueue, new_job
from xjobs.drivers.base import Batch, Claim, Enqueued, Lease, ListFilter, Matching, Nack, Progress
from xjobs.errors import DuplicateJob

HOUR = 3_600_000.0


def windowed(key: str = "k1", window: float | None = HOUR, **kw):
    return new_job(key, **kw)._replace(dedupe_window_ms=window)


# -- dedupe windows --------------------------------------------------------------------------------


def test_a_completed_job_keeps_its_key_for_its_window(driver, clock):
    [first] = driver.job_enqueue([windowed()])
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    clock.advance(1000)
    assert driver.job_enqueue([windowed()]) == [Enqueued(first.id, True)]   # 1 s after completion
    clock.advance(HOUR - 1000 - 1)
    assert driver.job_enqueue([windowed()]) == [Enqueued(first.id, True)]   # still inside
    clock.advance(1)
    [after] = driver.job_enqueue([windowed()])                              # the window has closed
    assert not after.deduped and after.id != first.id
    assert driver.job_enqueue([windowed()]) == [Enqueued(after.id, True)]   # the new job is live


def test_without_a_window_a_key_is_held_only_while_live(driver):
    first = enqueue(driver, "k1")
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    [again] = driver.job_enqueue([new_job("k1")])
    assert not again.deduped and again.id != first


def test_dead_and_cancelled_jobs_never_keep_a_key(driver):
    [a] = driver.job_enqueue([windowed("a")])
    [b] = driver.job_enqueue([windowed("b")])
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", error="x"))
    driver.job_cancel(b.id)
    assert [r.deduped for r in driver.job_enqueue([windowed("a"), windowed("b")])] == [False, False]


def test_a_window_is_scoped_to_name_and_tenant_and_a_batch_answers_in_order(driver, clock):
    [done] = driver.job_enqueue([windowed("k", tenant="t1")])
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    results = driver.job_enqueue([windowed("k", tenant="t1"), windowed("k", tenant="t2"),
                                  windowed("k", tenant="t1", name="other"), windowed("k", tenant="t1")])
    assert results[0] == Enqueued(done.id, True) and results[3] == Enqueued(done.id, True)
    assert not results[1].deduped and not results[2].deduped


def test_operator_retry_of_a_dead_job_is_refused_while_a_completed_one_holds_nothing(driver):
    enqueue(driver, "k")
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", error="x"))
    live = enqueue(driver, "k")
    with pytest.raises(DuplicateJob):
        driver.job_requeue(job.id)
    assert driver.job_get(live).state == "ready"


# -- pause -------------------------------------------------------------------------------------------


def test_a_paused_queue_is_claimed_by_nobody_until_resumed(driver):
    enqueue(driver, "a")
    enqueue(driver, "b", queue="other")
    driver.queue_pause("default", True, "ops")
    assert claim(driver) == []
    assert [j.queue for j in driver.job_claim(Claim(["default", "other"], 10, LEASE, "w"))] == ["other"]
    [control] = driver.queue_control()
    assert (control.name, control.paused, control.changed_by) == ("default", True, "ops")
    driver.queue_pause("default", False, "ops")
    assert len(claim(driver)) == 1
    assert [(c.name, c.paused) for c in driver.queue_control()] == [("default", False)]


# -- progress ----------------------------------------------------------------------------------------


def test_progress_lands_only_while_the_run_holds_its_job(driver, clock):
    enqueue(driver, "a")
    job = claim_one(driver)
    report = Progress(Lease(job.id, job.token), 40, 100, "page 40", 1.8e12)
    assert driver.job_progress_many([report, replace(report, lease=Lease(job.id, job.token + 1))]) == {job.id}
    assert driver.job_get(job.id).progress == {"done": 40, "total": 100, "note": "page 40", "at": 1.8e12}
    driver.job_nack(Nack(job.id, job.token, "retried", error="x"))
    assert driver.job_progress_many([report]) == set()
    again = claim_one(driver)
    assert driver.job_get(again.id).progress is None    # a new attempt starts without a report


# -- filters and the bulk verbs ------------------------------------------------------------------------


def _dead(driver, key: str, error: str, **kw) -> int:
    job_id = enqueue(driver, key, **kw)
    [job] = [j for j in claim(driver, kw.get("queue", "default")) if j.id == job_id]
    driver.job_nack(Nack(job.id, job.token, "dead", error=error))
    return job_id


def test_list_filters_by_tenant_time_and_error_text_and_pages_by_id(driver, clock):
    a = _dead(driver, "a", "HTTP 503 from upstream", tenant="t1")
    clock.advance(1000)
    b = _dead(driver, "b", "ValueError: bad", tenant="t2")
    clock.advance(1000)
    c = enqueue(driver, "c", tenant="t1")
    ids = lambda **kw: [v.id for v in driver.job_list(ListFilter(**kw))]   # noqa: E731
    assert ids(tenant="t1") == [c, a]
    assert ids(error="http 503") == [a]                  # case-insensitive, no wildcards
    assert ids(error="%") == []
    start = clock.now_ms() - 2000
    assert ids(since_ms=start + 500) == [c, b]
    assert ids(until_ms=start + 500) == [a]
    assert ids(since_ago_ms=1500) == [c, b]              # ages are taken on the driver's clock
    assert ids(until_ago_ms=1500) == [a]
    assert ids(limit=1) == [c] and ids(limit=1, before_id=c) == [b]
    assert ids(after_id=a) == [b, c]                     # forwards: what --follow prints next


def test_bulk_requeue_goes_in_batches_and_skips_keys_a_live_job_holds(driver):
    dead = [_dead(driver, k, "boom") for k in "abcd"]
    holder = enqueue(driver, "b")                        # b's key is live again
    where = ListFilter(state="dead")
    assert driver.job_count(where, ["dead"]) == Matching(4, dead[3])
    first = driver.job_requeue_batch(Batch(where, 0, dead[3], 2), "bulk retry")
    assert first == [(dead[0], "default"), (dead[1], None)]
    second = driver.job_requeue_batch(Batch(where, dead[1], dead[3], 2), "bulk retry")
    assert second == [(dead[2], "default"), (dead[3], "default")]
    assert driver.job_requeue_batch(Batch(where, dead[3], holder, 2), None) == []
    assert [driver.job_get(i).state for i in dead] == ["ready", "dead", "ready", "ready"]
    assert driver.job_get(dead[0]).history[-1]["outcome"] == "requeued"
    assert driver.job_get(holder).state == "ready"


def test_bulk_requeue_of_two_dead_jobs_with_one_key_requeues_the_newest(driver):
    older = _dead(driver, "k", "boom")
    newer = _dead(driver, "k", "boom")
    assert driver.job_requeue_batch(Batch(ListFilter(), 0, newer, 10), None) == [(older, None), (newer, "default")]


def test_bulk_cancel_takes_live_jobs_matching_the_filters(driver):
    a = enqueue(driver, "a", name="x")
    b = enqueue(driver, "b", name="y")
    running = claim_one(driver)
    assert driver.job_count(ListFilter(name="x"), ["ready", "running", "suspended"]) == Matching(1, a)
    assert driver.job_cancel_batch(Batch(ListFilter(name="x"), 0, b, 10), "bulk") == [a]
    assert driver.job_cancel_batch(Batch(ListFilter(), 0, a, 10), "bulk") == []   # b is past the bound
    assert driver.job_get(a).state == "cancelled" and driver.job_get(a).last_error == "bulk"
    assert driver.job_ack(running.id, running.token) is False   # a running job loses its lease
    assert driver.job_get(b).state == "ready"
    assert at(driver.job_get(a).finished_at) is not None


def test_a_job_declared_with_a_window_dedupes_after_completion(driver, clock):
    import xjobs
    from xjobs.enqueue import enqueue_many
    registry = xjobs.Registry()
    handle = xjobs.job(queue="default", idempotency_key=lambda i: f"charge:{i['order']}",
                       tenant=lambda i: i["org"], dedupe_window="1h", registry=registry)(lambda ctx, i: None)
    [first] = enqueue_many(handle, [{"order": 7, "org": "acme"}], driver=driver)
    job = claim_one(driver)
    driver.job_ack(job.id, job.token)
    clock.advance(1000)
    assert enqueue_many(handle, [{"order": 7, "org": "acme"}], driver=driver) == [xjobs.Enqueued(first.id, True)]
    clock.advance(HOUR)
    [later] = enqueue_many(handle, [{"order": 7, "org": "acme"}], driver=driver)
    assert not later.deduped and later.id != first.id


@pytest.mark.parametrize("window", [float("nan"), float("inf"), -1, 0, "soon", True])
def test_a_bad_dedupe_window_is_refused_at_declaration(window):
    import xjobs
    from xjobs.errors import InvalidOption
    with pytest.raises(InvalidOption) as refused:
        xjobs.job(idempotency_key=lambda i: "k", tenant="none", dedupe_window=window,
                  registry=xjobs.Registry())
    assert refused.value.option == "dedupe_window"


def test_queue_unknown_counts_ready_jobs_of_names_nobody_runs(driver):
    from xjobs.drivers.base import NewJob
    driver.job_enqueue([NewJob(name=name, queue=queue, payload=b"{}", idempotency_key=f"{name}:{queue}")
                        for name, queue in (("known", "a"), ("ghost", "a"), ("ghost", "b"), ("other", "b"))])
    assert driver.queue_unknown(["known", "other"]) == {"a": 1, "b": 1}
    assert driver.queue_unknown(["known", "other", "ghost"]) == {}
    assert driver.queue_unknown([]) == {"a": 2, "b": 2}
