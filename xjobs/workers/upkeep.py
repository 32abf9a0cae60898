"""The fleet's upkeep, on timers: wake due suspensions, rescue lapsed leases, prune old rows, age
the priorities of the aging queues' waiting jobs (``job(aging=)``, ``aging.py``).

Under ``xjobsd`` the scheduler's leader does it for the whole fleet (its cost does not grow
with the number of worker processes); a worker running without a scheduler does it itself.
Both own one ``Upkeep`` and call ``run`` on each pass.

Each chore has its own timer and a failure of one skips nothing else: a sleep of 2 s must not
wait for the next rescue sweep, and a failing prune must not stop the rescue. Retention is
measured by the driver on the database's clock: this machine's wall clock may run days ahead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping

from ..config import Settings
from ..drivers.base import JobDriver
from ..drivers.rate_keys import rate_keys_of
from ..drivers.records import Aging
from ..logs import event

log = logging.getLogger("xjobs.worker")
PRUNE_EVERY_MS = 60_000.0
PRUNE_BACKLOG_MS = 1_000.0   # a full batch came back: more is due, prune again this soon
SWEEP_LIMIT = 1000
# the per-minute outcome counts (job_rates) are kept this long: a minute's rows at most go per prune
RATE_RETENTION_MS = 2 * 86_400_000.0
# a rate key's window (job(rate=...)) is forgotten this long after it closed: a key seen again
# later opens a new one, so an idle key costs no row
RATE_KEY_RETENTION_MS = 3_600_000.0
# an aging queue is aged twice a step (a row gains its level within half a step of earning it),
# at least once a second and at most every AGE_SOONEST_MS; a full batch: again AGE_BACKLOG_MS later
AGE_EVERY_MS = 1_000.0
AGE_SOONEST_MS = 10.0
AGE_BACKLOG_MS = 20.0


@dataclass
class Pruned:
    """The rows one prune pass deleted, per table."""

    jobs: int = 0
    outbox: int = 0
    events: int = 0
    rates: int = 0

    @property
    def full(self) -> bool:
        """Whether a batch came back full: more is due at once (run counts go whole, no limit)."""
        return max(self.jobs, self.outbox, self.events) >= SWEEP_LIMIT

    def add(self, other: "Pruned") -> None:
        self.jobs += other.jobs
        self.outbox += other.outbox
        self.events += other.events
        self.rates += other.rates


class Upkeep:
    def __init__(self, *, driver: JobDriver, settings: Settings, who: str,
                 count: Callable[[str, int], None], outbox: bool = True,
                 agings: Mapping[str, Aging] | None = None) -> None:
        """``count(name, n)`` receives "sweeps", "rescued", "woken", "pruned" and "aged";
        ``outbox``: prune published outbox rows too; ``agings``: the aging queues (queue ->
        its step and floor, ``aging.queue_agings``), each aged on its own timer."""
        self._driver = driver
        self._settings = settings
        self._who = who
        self._count = count
        self._outbox = outbox
        self._next_wake = self._next_rescue = self._next_prune = 0.0
        self._agings = dict(agings or {})
        self._next_age = {queue: 0.0 for queue in self._agings}

    def next_due(self) -> float:
        return min(self._next_wake, self._next_rescue, self._next_prune, *self._next_age.values())

    def run(self, now_ms: float) -> None:
        settings, driver = self._settings, self._driver
        if now_ms >= self._next_wake:
            self._next_wake = now_ms + settings.wake_ms
            self._chore("waking due suspensions", lambda: self._count("woken", driver.job_wake(SWEEP_LIMIT)))
        if now_ms >= self._next_rescue:
            self._next_rescue = now_ms + settings.rescue_ms
            self._count("sweeps", 1)
            self._chore("rescuing lapsed leases", lambda: self._count("rescued", driver.job_rescue(SWEEP_LIMIT)))
        if now_ms >= self._next_prune:
            self._next_prune = now_ms + PRUNE_EVERY_MS
            if self.prune().full:
                self._next_prune = now_ms + PRUNE_BACKLOG_MS
        for queue, aging in self._agings.items():
            if now_ms >= self._next_age[queue]:
                self._next_age[queue] = now_ms + max(min(aging.step_ms / 2.0, AGE_EVERY_MS), AGE_SOONEST_MS)
                if self.age(aging) >= SWEEP_LIMIT:
                    self._next_age[queue] = now_ms + AGE_BACKLOG_MS

    def age_each(self) -> int:
        """One batch of every aging queue now, whatever its timer (a tick's pass); the rows moved."""
        return sum(self.age(aging) for aging in self._agings.values())

    def age(self, aging: Aging) -> int:
        """One bounded batch of ``aging``'s queue; answers the rows moved (0 when it failed)."""
        aged = 0

        def batch() -> None:
            nonlocal aged
            aged = self._driver.job_age(aging, SWEEP_LIMIT)
            self._count("aged", aged)
        self._chore(f"aging queue {aging.queue!r}", batch)
        return aged

    def prune(self) -> Pruned:
        """One bounded batch of each table. While a batch comes back full the leader's next
        follows within a second, so retention keeps up with a busy fleet (a batch a minute is
        1.4 million rows a day) without one long statement; a tick loops on ``full`` within
        its own budget instead."""
        settings, driver = self._settings, self._driver
        pruned = Pruned()

        def jobs() -> None:
            pruned.jobs = driver.job_prune(settings.retention_completed_ms, settings.retention_finished_ms,
                                           SWEEP_LIMIT)
            self._count("pruned", pruned.jobs)

        def outbox() -> None:
            pruned.outbox = driver.outbox_prune(settings.outbox_retention_ms, SWEEP_LIMIT)

        def events() -> None:
            pruned.events = driver.event_prune(settings.event_retention_ms, SWEEP_LIMIT)

        def rates() -> None:
            pruned.rates = driver.rate_prune(RATE_RETENTION_MS)

        def rate_keys() -> None:
            if (store := rate_keys_of(driver)) is not None:
                store.rate_key_prune(RATE_KEY_RETENTION_MS)
        # each table on its own: a failing one must not keep the others growing
        self._chore("pruning", jobs)
        if self._outbox:
            self._chore("pruning the outbox", outbox)
        self._chore("pruning events", events)
        self._chore("pruning run counts", rates)
        self._chore("pruning rate-key windows", rate_keys)
        return pruned

    def _chore(self, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:   # the database is away: the next timer tries again
            event(log, logging.WARNING, "upkeep.failed", "%s: %s failed: %s", self._who, what, exc,
                  chore=what, error=str(exc), by=self._who)


__all__ = ["AGE_BACKLOG_MS", "AGE_EVERY_MS", "PRUNE_EVERY_MS", "SWEEP_LIMIT", "Pruned", "Upkeep"]
