"""The scheduler role, on both drivers with a hand-stepped clock: leadership, one dispatch per
occurrence, catch-up after downtime, a fenced-out ex-leader, one round at a time, the drain
that hands the lease back, and maintenance on the leader only."""

from __future__ import annotations

import threading
import time

import pytest

import xjobs
from xjobs.config import Settings
from xjobs.drivers.base import ListFilter, Nack
from xjobs.workers.scheduler import ELECTION, Scheduler

HOUR = 3_600_000.0


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


@pytest.fixture
def digest(registry):
    return xjobs.job(queue="reports", idempotency_key=lambda i: f"digest:{i['list']}", tenant="none",
                     registry=registry)(lambda ctx, i: None)


def scheduler(driver, registry, holder: str, **settings) -> Scheduler:
    settings.setdefault("leader_lease_ms", 10_000)
    role = Scheduler(driver=driver, registry=registry, settings=Settings(**settings), identity=f"{holder}-child",
                     holder=holder, clock=lambda: 0.0)
    role.initialize()
    return role


def dispatched(driver) -> list[str]:
    return sorted(v.idempotency_key for v in driver.job_list(ListFilter(limit=1000)))


def test_a_follower_dispatches_nothing_and_the_leader_each_occurrence_once(driver, registry, digest, clock):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    a, b = scheduler(driver, registry, "a"), scheduler(driver, registry, "b")
    assert a.tick().leader and not b.tick().leader
    assert dispatched(driver) == []                  # a new task starts from now
    clock.advance(HOUR)
    report = a.tick()
    assert (report.dispatched, report.tasks) == (1, {"hourly": 1})
    assert b.tick().dispatched == 0 and a.tick().dispatched == 0   # the watermark moved past it
    [key] = dispatched(driver)
    assert key.startswith("task:hourly:") and key.endswith(":digest:all")
    assert a.stats()["leader"] == 1 and b.stats()["leader"] == 0


@pytest.mark.parametrize("catch_up, expected", [("run-once", 1), ("skip", 1), ("run-all", 5)])
def test_catch_up_after_the_scheduler_missed_24_occurrences(driver, registry, digest, clock, catch_up, expected):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"},
               catch_up=catch_up, max_catch_up=5, registry=registry)
    role = scheduler(driver, registry, "a", leader_lease_ms=100 * HOUR)
    role.tick()
    start = clock.now_ms()
    clock.advance(24 * HOUR + 1)                     # down for a day
    report = role.tick()
    keys = dispatched(driver)
    assert report.dispatched == len(keys) == expected
    occurrences = sorted(int(k.split(":")[2]) for k in keys)
    first_missed = (start // HOUR + 1) * HOUR
    if catch_up == "skip":
        assert occurrences == [(clock.now_ms() // HOUR) * HOUR]          # only the latest
    else:
        assert occurrences[0] == first_missed                           # from the earliest
    assert report.dropped == (19 if catch_up == "run-all" else 23 if catch_up == "skip" else 0)
    clock.advance(1000)
    assert role.tick().dispatched == 0               # the watermark moved past all of them


def test_a_paused_ex_leader_commits_nothing_after_another_took_over(driver, registry, digest, clock):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    a, b = scheduler(driver, registry, "a"), scheduler(driver, registry, "b")
    a.tick()
    clock.advance(HOUR + 10_001)                     # a was paused past its lease
    assert b.tick().leader                           # b took over and dispatched the occurrence
    assert len(dispatched(driver)) == 1
    # a resumes in the middle of what it thinks is its round: its dispatch is fenced out
    state = {w.task: w.watermark_ms for w in driver.schedule_state()}
    report = a._round()
    assert not report.leader and report.dispatched == 0 and not a.is_leader
    assert len(dispatched(driver)) == 1
    assert {w.task: w.watermark_ms for w in driver.schedule_state()} == state


def test_a_job_that_completed_is_not_dispatched_again_by_the_next_leader(driver, registry, digest, clock):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    a, b = scheduler(driver, registry, "a"), scheduler(driver, registry, "b")
    a.tick()
    clock.advance(HOUR)
    a.tick()
    [job] = driver.job_claim(["reports"], 10, 30_000, "w")
    driver.job_ack(job.id, job.token)                 # its key is free again
    clock.advance(10_001)
    assert b.tick().leader and b.tick().dispatched == 0   # the watermark, not the key, says done
    assert len(dispatched(driver)) == 1


def test_a_second_tick_joins_the_round_in_flight(driver, registry, digest):
    role = scheduler(driver, registry, "a")
    entered, release = threading.Event(), threading.Event()
    real = role._round

    def slow_round():
        entered.set()
        release.wait(5)
        return real()
    role._round = slow_round
    first: list = []
    thread = threading.Thread(target=lambda: first.append(role.tick()))
    thread.start()
    assert entered.wait(5)
    joined: list = []
    joiner = threading.Thread(target=lambda: joined.append(role.tick()))
    joiner.start()
    waiting_to_join(role)
    release.set()
    thread.join(5)
    joiner.join(5)
    assert joined[0] is first[0] and role.totals["rounds"] == 1


def waiting_to_join(role: Scheduler) -> None:
    """Until a second caller of ``tick()`` waits on the round in flight (the condition's
    waiter list is CPython's, read only here, so the test does not race the joiner)."""
    deadline = time.monotonic() + 5
    while not role._round_done._waiters:       # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the second tick never waited"
        time.sleep(0.001)


def test_a_joined_round_that_fails_fails_for_the_joiner_too(driver, registry, digest):
    role = scheduler(driver, registry, "a")
    entered, release = threading.Event(), threading.Event()

    def failing_round():
        entered.set()
        release.wait(5)
        raise RuntimeError("the database went away mid-round")
    role._round = failing_round
    errors: list = []

    def tick() -> None:
        try:
            role.tick()
        except RuntimeError as exc:
            errors.append(exc)
    first = threading.Thread(target=tick)
    first.start()
    assert entered.wait(5)
    joiner = threading.Thread(target=tick)
    joiner.start()
    waiting_to_join(role)
    release.set()
    first.join(5)
    joiner.join(5)
    assert len(errors) == 2 and errors[0] is errors[1]


def test_close_hands_the_lease_back_unless_a_round_was_abandoned(driver, registry, digest, clock):
    a = scheduler(driver, registry, "a")
    a.tick()
    a.stop_accepting("drain")
    a.close(None)
    assert driver.leader_get(ELECTION).live is False and not a.is_leader
    assert driver.leader_elect(ELECTION, "b", 10_000)      # no wait for a's lease to lapse

    c = scheduler(driver, registry, "c")
    c.is_leader = True
    c._in_round = True                                     # a round that never ends
    c.close(deadline_ms=-1.0)                              # the deadline has passed
    assert c.abandoned and not c.is_leader


def test_maintenance_runs_on_the_leader_only(driver, registry, digest, clock):
    a, b = scheduler(driver, registry, "a", rescue_ms=1000), scheduler(driver, registry, "b", rescue_ms=1000)
    digest.enqueue  # noqa: B018 (the job exists; enqueue through the driver below)
    from xjobs.drivers.base import NewJob
    driver.job_enqueue([NewJob(name="digest", queue="reports", payload=b"{}", idempotency_key="k")])
    [job] = driver.job_claim(["reports"], 1, 1000, "gone")
    clock.advance(1001)
    for role in (a, b):
        role.run_once(0.0)
    assert a.totals["rescued"] == 1 and b.totals["rescued"] == 0
    assert driver.job_get(job.id).state == "ready"
    assert driver.job_nack(Nack(job.id, job.token, "late")) is False
