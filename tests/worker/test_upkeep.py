"""The fleet's upkeep: each chore on its own timer, and retention that keeps up with a backlog."""

from __future__ import annotations

from xjobs.config import Settings
from xjobs.drivers.base import Aging
from xjobs.workers.upkeep import AGE_BACKLOG_MS, AGE_EVERY_MS, PRUNE_BACKLOG_MS, PRUNE_EVERY_MS, SWEEP_LIMIT, Upkeep


class Store:
    """Answers each prune with the next count it is given; records what was asked."""

    def __init__(self, pruned: list[int], aged: list[int] | None = None) -> None:
        self.pruned = pruned
        self.aged = aged or []
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

    def job_age(self, aging: Aging, limit: int) -> int:
        self.calls.append(f"age {aging.queue}")
        return self.aged.pop(0)


def make(store: Store, agings: dict[str, Aging] | None = None) -> tuple[Upkeep, dict[str, int]]:
    counts: dict[str, int] = {}
    upkeep = Upkeep(driver=store, settings=Settings(wake_ms=250, rescue_ms=5000), who="test",  # type: ignore[arg-type]
                    count=lambda name, n: counts.__setitem__(name, counts.get(name, 0) + n), agings=agings)
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


def test_each_aging_queue_is_aged_twice_a_step_at_least_once_a_second_and_again_soon_when_full():
    agings = {"fast": Aging("fast", 300.0, 0), "slow": Aging("slow", 3_600_000.0, 0)}
    store = Store([0], aged=[3, 0, SWEEP_LIMIT, 5, 0, 0, 0])
    upkeep, counts = make(store, agings)

    def aged_at(now_ms: float) -> list[str]:
        upkeep.run(now_ms)
        return [call for call in store.calls if call.startswith("age")]   # wake's timer runs too
    assert aged_at(0.0) == ["age fast", "age slow"]
    assert upkeep.next_due() == 150.0                       # half of fast's step
    assert aged_at(150.0) == ["age fast", "age slow", "age fast"]
    assert upkeep.next_due() == 150.0 + AGE_BACKLOG_MS       # a full batch: again soon
    assert aged_at(150.0 + AGE_BACKLOG_MS)[-1] == "age fast"
    assert len(aged_at(150.0 + AGE_BACKLOG_MS + 149)) == 4   # a short one: half a step later
    assert aged_at(150.0 + AGE_BACKLOG_MS + 150)[-1] == "age fast"
    assert aged_at(AGE_EVERY_MS)[-2:] == ["age fast", "age slow"]   # slow's step is long: once a second
    assert counts["aged"] == 3 + SWEEP_LIMIT + 5


def test_a_failing_aging_pass_is_tried_again_on_its_timer_and_skips_nothing_else():
    store = Store([0], aged=[])   # every aging pass raises (nothing to pop)
    upkeep, counts = make(store, {"q": Aging("q", 300.0, 0), "r": Aging("r", 300.0, 0)})
    upkeep.run(0.0)
    assert store.calls == ["wake", "rescue", "prune", "age q", "age r"] and "aged" not in counts
    assert upkeep.next_due() == 150.0
