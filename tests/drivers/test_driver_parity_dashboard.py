"""Conformance of what the dashboard reads and does, against the memory and Postgres drivers:
dead letters grouped by error, the per-minute outcome counts workers report, a retry
or cancel that records who asked, and the jobs running now."""

from __future__ import annotations

import math

import pytest

from tests.drivers.parity import at, claim, claim_one, enqueue
from xjobs import admin
from xjobs.drivers.base import DeadGroup, Lease, ListFilter, Nack, Progress, RatePoint, RunningPage
from xjobs.drivers.records import ERROR_GROUP_WIDTH
from xjobs.errors import InvalidOption

MINUTE = 60_000.0


def kill(driver, error: str, **kw) -> int:
    job_id = enqueue(driver, f"k{error}{kw}", **kw)
    job = claim_one(driver, kw.get("queue", "default"))
    driver.job_nack(Nack(job.id, job.token, "dead", error=error))
    return job_id


LONG = "TimeoutError: " + "the smtp server did not answer " * 10   # longer than a group's prefix


def test_dead_letters_group_by_queue_name_and_the_first_characters_of_their_error(driver):
    a = [kill(driver, f"{LONG} (try {i})") for i in range(3)]
    b = kill(driver, "KeyError: 'user'", name="sync")
    c = kill(driver, "KeyError: 'user'", name="sync", queue="other")
    groups = driver.job_dead_groups(limit=10)
    assert groups[0] == DeadGroup("default", "send", LONG[:ERROR_GROUP_WIDTH], 3, a[-1], groups[0].newest_at)
    assert {(g.queue, g.name, g.error, g.count, g.newest_id) for g in groups[1:]} == {
        ("default", "sync", "KeyError: 'user'", 1, b), ("other", "sync", "KeyError: 'user'", 1, c)}
    assert groups[0].newest_at is not None
    assert len(driver.job_dead_groups(limit=1)) == 1
    with pytest.raises(InvalidOption):
        driver.job_dead_groups(limit=-1)


def test_retrying_a_group_takes_exactly_that_group(driver):
    for i in range(2):
        kill(driver, f"{LONG} (try {i})")
    short = kill(driver, "Timeout")                       # contained in others: its own group
    longer = kill(driver, "Connection timeout, then Timeout")
    silent = kill(driver, "")                             # died with no error text
    groups = {g.error: g for g in driver.job_dead_groups()}
    assert set(groups) == {LONG[:ERROR_GROUP_WIDTH], "Timeout", "Connection timeout, then Timeout", ""}
    result = admin.retry_jobs(driver, admin.group_filter(groups["Timeout"]), by="ui:alice")
    assert (result.matched, result.changed) == (1, 1)
    assert [driver.job_get(i).state for i in (short, longer, silent)] == ["ready", "dead", "dead"]
    result = admin.retry_jobs(driver, admin.group_filter(groups[""]), by="ui:alice")
    assert (result.matched, result.changed) == (1, 1) and driver.job_get(silent).state == "ready"
    result = admin.retry_jobs(driver, admin.group_filter(groups[LONG[:ERROR_GROUP_WIDTH]]), by="ui:alice")
    assert (result.matched, result.changed) == (2, 2)
    assert [g.error for g in driver.job_dead_groups()] == ["Connection timeout, then Timeout"]


def test_a_filter_refuses_nul_characters_and_overlong_groups(driver):
    with pytest.raises(InvalidOption):
        driver.job_list(ListFilter(error="a\x00b"))
    with pytest.raises(InvalidOption):
        driver.job_list(ListFilter(error_group="x" * (ERROR_GROUP_WIDTH + 1)))


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


def test_running_jobs_newest_started_first_by_keyset_and_per_queue(driver, clock):
    for i in range(4):
        enqueue(driver, f"r{i}")
    enqueue(driver, "other", queue="other")
    enqueue(driver, "waits")                                   # stays ready: never listed
    first = claim(driver, limit=2, worker="w1")                # two started at the same instant
    clock.advance(1_000)
    later = claim_one(driver, worker="w2")
    clock.advance(1_000)
    elsewhere = claim_one(driver, "other", worker="w3")
    done = claim_one(driver, worker="w4")
    driver.job_ack(done.id, done.token)                        # finished: never listed
    driver.job_progress_many([Progress(Lease(later.id, later.token), 3, 10, "page 3", clock.now_ms())])
    rows = driver.job_running(RunningPage())
    tied = sorted((j.id for j in first), reverse=True)         # the same start: the higher id first
    assert [r.id for r in rows] == [elsewhere.id, later.id, *tied]
    assert [(r.queue, r.claimed_by, r.attempt) for r in rows[:2]] == [("other", "w3", 1), ("default", "w2", 1)]
    assert at(rows[0].started_at) == at(clock.now_ms()) and at(rows[1].started_at) == at(clock.now_ms() - 1_000)
    assert rows[1].progress == {"done": 3, "total": 10, "note": "page 3", "at": clock.now_ms()}
    assert rows[0].progress is None and rows[0].lease_expires_at is not None
    assert [r.id for r in driver.job_running(RunningPage(queue="default"))] == [later.id, *tied]
    page = driver.job_running(RunningPage(limit=2))
    rest = driver.job_running(RunningPage(limit=2, before=(page[-1].started_at, page[-1].id)))
    assert [r.id for r in page + rest] == [r.id for r in rows]     # between the tied ones, too
    assert driver.job_running(RunningPage(before=(rows[-1].started_at, rows[-1].id))) == []


@pytest.mark.parametrize("page", [RunningPage(limit=-1), RunningPage(queue="a\x00b"),
                                  RunningPage(before=(1.0, "7")),  # type: ignore[arg-type]
                                  RunningPage(before=(math.inf, 7)),
                                  RunningPage(before=(1.0,))])   # type: ignore[arg-type]
def test_a_running_page_refuses_a_bad_limit_queue_or_cursor(driver, page):
    with pytest.raises(InvalidOption):
        driver.job_running(page)
