"""Counters published by the supervisor never go backwards across child restarts."""

from __future__ import annotations

from hypothesis import given, strategies as st

from xjobs.supervisor.tally import Duration, QueueCount, RoleCounter, Settled, SlotCounter, Tally
from xjobs.workers.stats import WorkerStats
from xjobs.workers.telemetry import Histogram


def snapshot(completed: int, lost: int = 0) -> WorkerStats:
    return WorkerStats(in_flight=3, completed=completed, lease_lost=lost,
                       jobs={"send": {"completed": completed}},
                       durations={"send": Histogram([completed, completed], completed * 0.5, completed)})


def test_a_restarted_child_adds_to_what_its_predecessor_counted():
    tally = Tally()
    tally.observe("w:1", "worker", "emails", 1, snapshot(10, 1))
    tally.observe("w:1", "worker", "emails", 1, snapshot(25, 2))
    tally.forget("w:1")                                  # killed
    tally.observe("w:2", "worker", "emails", 1, snapshot(0))
    tally.observe("w:2", "worker", "emails", 1, snapshot(4))
    assert tally.get(Settled("emails", "send", "completed")) == 29
    assert tally.get(QueueCount("emails", "lease_lost")) == 2
    assert tally.get(Duration("emails", "send", "count")) == 29
    assert tally.get(Duration("emails", "send", "sum")) == 29 * 0.5
    assert tally.get(SlotCounter("worker", "emails", 1, "completed")) == 29
    assert RoleCounter("worker", "emails", "in_flight") not in tally.totals   # a gauge


def test_a_snapshot_seen_twice_counts_once():
    tally = Tally()
    for _ in range(3):
        tally.observe("w:1", "worker", "q", 1, snapshot(7))
    assert tally.get(Settled("q", "send", "completed")) == 7


@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=6), min_size=1, max_size=6))
def test_totals_are_the_sum_of_every_process_and_never_decrease(processes):
    tally = Tally()
    seen = 0.0
    expected = 0
    for n, increments in enumerate(processes):
        running = 0
        for inc in increments:
            running += inc
            tally.observe(f"w:{n}", "worker", "q", 1, snapshot(running))
            total = tally.get(Settled("q", "send", "completed"))
            assert total >= seen
            seen = total
        expected += running
        tally.forget(f"w:{n}")
    assert tally.get(Settled("q", "send", "completed")) == expected
