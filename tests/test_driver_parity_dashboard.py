"""Conformance of what the dashboard reads and does, against the memory and Postgres drivers:
dead letters grouped by error, the per-minute outcome counts workers report, and a retry
or cancel that records who asked."""

from __future__ import annotations

import pytest

from xjobs import admin
from xjobs.drivers.base import DeadGroup, Nack, RatePoint
from xjobs.errors import InvalidOption

from .test_driver_parity import claim_one, enqueue

MINUTE = 60_000.0


def kill(driver, error: str, **kw) -> int:
    job_id = enqueue(driver, f"k{error}{kw}", **kw)
    job = claim_one(driver, kw.get("queue", "default"))
    driver.job_nack(Nack(job.id, job.token, error, dead=True))
    return job_id


def test_dead_letters_group_by_queue_name_and_the_start_of_their_error(driver):
    a = [kill(driver, f"Timeout talking to smtp (try {i})") for i in range(3)]
    b = kill(driver, "KeyError: 'user'", name="sync")
    c = kill(driver, "KeyError: 'user'", name="sync", queue="other")
    groups = driver.job_dead_groups(limit=10, width=18)
    assert groups[0] == DeadGroup("default", "send", "Timeout talking to", 3, a[-1], groups[0].newest_at)
    assert {(g.queue, g.name, g.error, g.count, g.newest_id) for g in groups[1:]} == {
        ("default", "sync", "KeyError: 'user'", 1, b), ("other", "sync", "KeyError: 'user'", 1, c)}
    assert groups[0].newest_at is not None
    assert len(driver.job_dead_groups(limit=1)) == 1
    with pytest.raises(InvalidOption):
        driver.job_dead_groups(limit=-1)


def test_retrying_a_group_touches_only_that_group(driver):
    for i in range(2):
        kill(driver, f"Timeout talking to smtp (try {i})")
    other = kill(driver, "KeyError: 'user'")
    [group] = [g for g in driver.job_dead_groups(width=18) if g.error.startswith("Timeout")]
    result = admin.retry_jobs(driver, admin.group_filter(group), by="ui:alice")
    assert (result.matched, result.changed) == (2, 2)
    assert driver.job_get(other).state == "dead"
    assert [g.error for g in driver.job_dead_groups()] == ["KeyError: 'user'"]


def test_a_retry_and_a_cancel_record_who_asked(driver):
    job_id = kill(driver, "boom")
    view = admin.retry_job(driver, job_id, by="ui:alice")
    assert (view.state, view.history[-1]["outcome"], view.history[-1]["error"]) == \
        ("ready", "requeued", "retried by ui:alice")
    view = admin.cancel_job(driver, job_id, by="ui:bob", reason="duplicate order")
    assert view.last_error == "cancelled by ui:bob: duplicate order"
    assert view.history[-1]["error"] == "cancelled by ui:bob: duplicate order"


def test_outcome_counts_add_up_per_minute_and_are_pruned(driver, clock):
    start = clock.now_ms() - clock.now_ms() % MINUTE
    driver.rate_add({"default": {"completed": 5, "dead": 1}})
    driver.rate_add({"default": {"completed": 2, "retried": 0}, "other": {"completed": 1}})
    clock.advance(MINUTE)
    driver.rate_add({"default": {"completed": 4}})
    assert driver.rate_series(10 * MINUTE) == [
        RatePoint("default", start, "completed", 7), RatePoint("default", start, "dead", 1),
        RatePoint("other", start, "completed", 1),
        RatePoint("default", start + MINUTE, "completed", 4)]
    assert driver.rate_series(0) == [RatePoint("default", start + MINUTE, "completed", 4)]
    clock.advance(2 * MINUTE)
    assert driver.rate_prune(2 * MINUTE) == 3
    assert [p.count for p in driver.rate_series(10 * MINUTE)] == [4]
    with pytest.raises(InvalidOption):
        driver.rate_add({"default": {"completed": -1}})
