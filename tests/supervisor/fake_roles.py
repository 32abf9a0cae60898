"""Small roles for the supervisor's own tests: no database, behaviour chosen per test.

``behavior`` is a set of words: ``fail`` (initialize raises), ``busy`` (one job in flight
until the drain signals it), ``deaf`` (that job ignores the drain: in flight forever),
``hang`` (run_once blocks: the child goes silent), ``work`` (each pass "claims" and
"completes" one job, so counters grow), ``lose`` (each pass loses a lease), ``odd`` (reports
its in-flight count as a string, a broken contract). A busy job stops
only when ``stop_accepting`` interrupts it: without ``interrupt`` it stays in flight.

``Ticker`` is a role that is not a worker, built on ``RoleBase``: a singleton with a gauge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

from xjobs.supervisor.roles import RoleKind
from xjobs.supervisor.slots import RoleSpec
from xjobs.workers.role import RoleBase, RoleGauge, RolePolicy
from xjobs.workers.stats import WorkerStats
from xjobs.workers.telemetry import Histogram, RoleStats

TICKING = RoleGauge("xjobs_ticker_ticking", "ticking", "1 while the ticker ticks.")


class FakeRole:
    role = "worker"

    def __init__(self, identity: str, queue: str | None = "q", behavior: Sequence[str] = ()) -> None:
        self.identity = identity
        self.queue = queue
        self.behavior = set(behavior)
        self.calls: list[tuple] = []
        self.accepting = False
        self.busy = 0
        self.claimed = 0
        self.passes = 0
        self.lease_lost = 0
        self.closed_with: float | None = None

    def initialize(self) -> None:
        self.calls.append(("initialize",))
        if "fail" in self.behavior:
            raise RuntimeError("cannot initialize (as asked)")
        self.accepting = True
        if "busy" in self.behavior or "deaf" in self.behavior:
            self.busy = 1

    def wakeup_fds(self) -> Sequence[int]:
        return ()

    def run_once(self, now_ms: float) -> float:
        self.passes += 1
        if "hang" in self.behavior:
            time.sleep(3600)
        if "work" in self.behavior and self.accepting:
            self.claimed += 1
        if "lose" in self.behavior and self.accepting:
            self.lease_lost += 1
        return 20.0

    def stop_accepting(self, reason: str, interrupt: bool = True, deadline_ms: float | None = None) -> None:
        self.calls.append(("stop_accepting", reason) if interrupt else ("stop_accepting", reason, False))
        self.accepting = False
        if interrupt and "deaf" not in self.behavior:
            self.busy = 0

    def in_flight(self) -> int:
        return "none" if "odd" in self.behavior else self.busy  # type: ignore[return-value]

    def close(self, deadline_monotonic_ms: float | None) -> None:
        self.calls.append(("close", deadline_monotonic_ms))
        self.closed_with = deadline_monotonic_ms

    def stats(self) -> WorkerStats:
        return WorkerStats(in_flight=self.busy, claimed=self.claimed, completed=self.claimed,
                           lease_lost=self.lease_lost,
                           jobs={"fake": {"completed": self.claimed}} if self.claimed else {},
                           durations={"fake": Histogram([self.claimed] * 15, self.claimed * 0.001,
                                                        self.claimed)} if self.claimed else {})


def maker(queue: str | None = "q", *behavior: str):
    return lambda identity: FakeRole(identity, queue, behavior)


@dataclass
class TickerStats(RoleStats):
    passes: int = 0
    ticking: int = 0
    phase: str = ""
    interrupted: str = ""


class Ticker(RoleBase):
    """A singleton that is not a worker: it counts its passes while accepting, and reports
    whether it ticks as a gauge. Its stats say what the host did to it (``interrupted``,
    ``phase``), so a test in the parent can see it through the heartbeats."""

    role = "ticker"
    policy = RolePolicy(gauges=(TICKING,), stats=TickerStats)

    def __init__(self, identity: str, queue: str | None = None) -> None:
        super().__init__(identity, queue)
        self.passes = 0

    def run_once(self, now_ms: float) -> float:
        if self.accepting:
            self.passes += 1
        return 20.0

    def stats(self) -> TickerStats:
        phase = "closed" if self.closed else "ticking" if self.accepting else "draining"
        return TickerStats(passes=self.passes, ticking=int(self.accepting), phase=phase,
                           interrupted=self.interrupted or "")


def ticker_spec(**policy: object) -> RoleSpec:
    """The ticker's spec, as ``supervisor/roles.py`` would build it; ``policy`` overrides."""
    kind = RoleKind.of(Ticker)
    return RoleSpec(kind.role, None, 1, 1, lambda identity: Ticker(identity),
                    replace(kind.policy, **policy))  # type: ignore[arg-type]
