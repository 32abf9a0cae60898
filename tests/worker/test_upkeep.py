"""The fleet's upkeep: each chore on its own timer, and retention that keeps up with a backlog."""

from __future__ import annotations

from xjobs.config import Settings
from xjobs.workers.upkeep import PRUNE_BACKLOG_MS, PRUNE_EVERY_MS, SWEEP_LIMIT, Upkeep


class Store:
    """Answers each prune with the next count it is given; records what was asked."""

    def __init__(self, pruned: list[int]) -> None:
        self.pruned = pruned
        self.calls: list[str] = []

    def job_wake(self, limit: int) -> int:
        self.calls.append("wake")
        return 0

    def job_rescue(self, limit: int) -> int:
        self.calls.append("rescue")
        return 0

    def job_prune(self, completed_for: float, finished_for: float, limit: int) -> int:
        self.calls.append("prune")
        return self.pruned.pop(0)

    def outbox_prune(self, retention: float, limit: int) -> int:
        return 0

    def event_prune(self, retention: float, limit: int) -> int:
        return 0

    def rate_prune(self, retention: float) -> int:
        return 0


def make(store: Store) -> tuple[Upkeep, dict[str, int]]:
    counts: dict[str, int] = {}
    upkeep = Upkeep(driver=store, settings=Settings(wake_ms=250, rescue_ms=5000), who="test",  # type: ignore[arg-type]
                    count=lambda name, n: counts.__setitem__(name, counts.get(name, 0) + n))
    return upkeep, counts


def test_a_full_prune_batch_is_followed_within_a_second_and_a_short_one_waits_a_minute():
    store = Store([SWEEP_LIMIT, SWEEP_LIMIT, 10])
    upkeep, counts = make(store)
    upkeep.run(0.0)
    assert store.calls == ["wake", "rescue", "prune"]
    upkeep.run(PRUNE_BACKLOG_MS - 1)
    assert store.calls.count("prune") == 1
    upkeep.run(PRUNE_BACKLOG_MS)
    assert store.calls.count("prune") == 2
    upkeep.run(2 * PRUNE_BACKLOG_MS)
    assert store.calls.count("prune") == 3
    assert counts["pruned"] == 2 * SWEEP_LIMIT + 10 and counts["sweeps"] == 1
    upkeep.run(3 * PRUNE_BACKLOG_MS)   # the last batch was short: the backlog is gone
    assert store.calls.count("prune") == 3
    assert upkeep.next_due() <= 2 * PRUNE_BACKLOG_MS + PRUNE_EVERY_MS


def test_a_failing_chore_skips_nothing_else():
    store = Store([])   # the prune raises (nothing to pop): wake and rescue still ran
    upkeep, counts = make(store)
    upkeep.run(0.0)
    assert store.calls == ["wake", "rescue", "prune"] and counts["sweeps"] == 1
