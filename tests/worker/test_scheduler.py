"""The scheduler role, on both drivers with a hand-stepped clock: leadership, one dispatch per
occurrence, catch-up after downtime, a fenced-out ex-leader, one round at a time, the drain
that hands the lease back, and maintenance on the leader only."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import xjobs
from xjobs.config import Settings
from xjobs.drivers.base import Claim, ListFilter, Nack
from xjobs.workers.scheduler import ELECTION, Scheduler

from .pacing import HOUR, scheduler


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


@pytest.fixture
def digest(registry):
    return xjobs.job(queue="reports", idempotency_key=lambda i: f"digest:{i['list']}", tenant="none",
                     registry=registry)(lambda ctx, i: None)


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
    assert a.stats().leader == 1 and b.stats().leader == 0


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
    [job] = driver.job_claim(Claim(["reports"], 10, 30_000, "w"))
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
    role._round = slow_round  # type: ignore[method-assign]
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
    """Until a second caller of ``tick()`` waits on the round in flight (the scheduler's
    ``joined`` hook, so the test does not race the joiner)."""
    assert role.joined.wait(5), "the second tick never waited"


def test_a_joined_round_that_fails_fails_for_the_joiner_too(driver, registry, digest):
    role = scheduler(driver, registry, "a")
    entered, release = threading.Event(), threading.Event()

    def failing_round():
        entered.set()
        release.wait(5)
        raise RuntimeError("the database went away mid-round")
    role._round = failing_round  # type: ignore[method-assign]
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
    [job] = driver.job_claim(Claim(["reports"], 1, 1000, "gone"))
    clock.advance(1001)
    for role in (a, b):
        role.run_once(0.0)
    assert a.totals["rescued"] == 1 and b.totals["rescued"] == 0
    assert driver.job_get(job.id).state == "ready"
    assert driver.job_nack(Nack(job.id, job.token, "retried", error="late")) is False


class _HeldDispatch:
    """Makes the scheduler's driver block inside ``schedule_dispatch`` until released, so a
    round is really in flight on another thread (the cross-thread path of a drain)."""

    def __init__(self, driver, monkeypatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.calls: list[str] = []
        real = driver.schedule_dispatch

        def held(dispatch):
            self.calls.append(dispatch.task)
            self.entered.set()
            self.release.wait(10)
            return real(dispatch)
        monkeypatch.setattr(driver, "schedule_dispatch", held)


def _round_in_flight(role: Scheduler) -> threading.Thread:
    thread = threading.Thread(target=role.tick, daemon=True)
    thread.start()
    return thread


def _events(caplog, name: str) -> list:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_close_waits_a_round_in_flight_out_then_hands_the_lease_back(driver, registry, digest, clock,
                                                                     monkeypatch):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    role = scheduler(driver, registry, "a")
    role.tick()
    clock.advance(HOUR)
    held = _HeldDispatch(driver, monkeypatch)
    thread = _round_in_flight(role)
    assert held.entered.wait(5)
    role.stop_accepting("drain")
    closing = threading.Thread(target=role.close, args=(time.monotonic() * 1000 + 10_000,), daemon=True)
    role.clock = lambda: time.monotonic() * 1000
    closing.start()
    closing.join(0.3)
    assert closing.is_alive(), "close must wait for the round in flight"
    assert driver.leader_get(ELECTION).live                 # not handed back while it may commit
    held.release.set()
    thread.join(5)
    closing.join(5)
    assert not role.abandoned and len(dispatched(driver)) == 1      # the round committed
    assert driver.leader_get(ELECTION).live is False                # then the lease was handed back


def test_a_round_rereads_the_drain_before_each_task(driver, registry, digest, clock, monkeypatch):
    for name in ("first", "second"):
        xjobs.task(name=name, cron="0 * * * *", tz="UTC", job=digest, input={"list": name}, registry=registry)
    role = scheduler(driver, registry, "a")
    role.tick()
    clock.advance(HOUR)
    held = _HeldDispatch(driver, monkeypatch)
    thread = _round_in_flight(role)
    assert held.entered.wait(5)
    role.stop_accepting("drain")            # heard mid-round, from another thread
    held.release.set()
    thread.join(5)
    assert held.calls == ["first"]          # the second task was not started
    assert dispatched(driver) == [k for k in dispatched(driver) if ":first:" in k] and len(dispatched(driver)) == 1


def test_an_abandoned_round_leaves_the_lease_held_to_expire(driver, registry, digest, clock, monkeypatch, caplog):
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    role = scheduler(driver, registry, "c")
    assert role.tick().leader                       # it really holds the lease
    clock.advance(HOUR)
    held = _HeldDispatch(driver, monkeypatch)
    thread = _round_in_flight(role)
    assert held.entered.wait(5)
    role.stop_accepting("drain")
    role.close(deadline_ms=-1.0)                    # the deadline has passed, the round still runs
    assert role.abandoned and not role.is_leader
    view = driver.leader_get(ELECTION)
    assert view.live and view.holder == "c"         # NOT handed back: it expires on its own
    assert not driver.leader_elect(ELECTION, "b", 10_000)
    [record] = _events(caplog, "scheduler.drain.abandoned")
    assert record.levelname == "WARNING" and record.holder == "c"
    held.release.set()
    thread.join(5)


def test_leadership_gained_and_lost_are_stable_events(driver, registry, digest, clock, caplog):
    caplog.set_level(logging.INFO, logger="xjobs")
    a, b = scheduler(driver, registry, "a"), scheduler(driver, registry, "b")
    assert a.tick().leader
    [gained] = _events(caplog, "scheduler.leader.gained")
    assert (gained.levelname, gained.holder) == ("INFO", "a")
    clock.advance(10_001)                           # a paused past its lease
    assert b.tick().leader and not a.tick().leader
    [lost] = _events(caplog, "scheduler.leader.lost")
    assert (lost.levelname, lost.holder) == ("WARNING", "a")
    assert [r.holder for r in _events(caplog, "scheduler.leader.gained")] == ["a", "b"]


def test_the_scheduler_plans_with_the_resolver_it_is_given(driver, registry, digest, clock):
    class EveryMinute:
        """A stand-in resolver: an occurrence at every whole minute, whatever the expression."""

        def after(self, expr, tz, after_ms):
            return (after_ms // 60_000 + 1) * 60_000

        def between(self, expr, tz, after_ms, until_ms, limit):
            out: list[float] = []
            at = self.after(expr, tz, after_ms)
            while at <= until_ms and len(out) < limit:
                out.append(at)
                at += 60_000
            return out

        def latest(self, expr, tz, at_ms):
            return (at_ms // 60_000) * 60_000
    xjobs.task(name="yearly", cron="0 0 1 1 *", tz="UTC", job=digest, input={"list": "all"}, registry=registry)
    role = Scheduler(driver=driver, registry=registry, settings=Settings(leader_lease_ms=10 * HOUR),
                     identity="a-child", holder="a", clock=lambda: 0.0, resolver=EveryMinute())
    role.initialize()
    role.tick()
    clock.advance(60_000)
    assert role.tick().dispatched == 1              # a yearly cron due after a minute: the stub's answer
