"""When to start a child again after it died, and when a slot is in a crash loop.

The long backoff protects against a child that cannot start: an app that fails to import, a
database that refuses it, a broken configuration. Restarting it at once would only burn CPU
and connections, so exits BEFORE the child got ready back off exponentially with equal
jitter, on the same curve job retries use (``retry.Retry``): ``min(cap, base * 2**(n-1))``,
half fixed and half random, so a fleet that lost the database together does not reconnect in
lock step.

A child that got ready and then died was killed from outside (the OOM killer, an operator, a
chaos test) or by one of its jobs, and job crashes are dealt with per job (the suspect runs
alone and pays in attempts). Leaving the queue without a worker for long would punish every
other job, so such a child starts again within ``after_ready_cap_s``: at once for the first
death, on the same curve for deaths in quick succession (``burst_window_s``), so a deploy in
which every job kills its process still restarts, and burns attempts, at a bounded pace.

A crash loop is reported (status, ``xjobs_child_crash_loop``, the log) whenever the slot has
``crash_loop_after`` failed starts in a row, or that many unexpected exits of any kind within
``crash_window_s``: a poison job crashing its process again and again shows while it
happens. A crash loop is never given up on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..options import finite_count, finite_option
from ..retry import Retry


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.1
    cap_s: float = 30.0
    stable_s: float = 5.0
    crash_loop_after: int = 3
    crash_window_s: float = 60.0
    after_ready_cap_s: float = 1.0
    burst_window_s: float = 10.0
    _curve: Retry = field(init=False, repr=False, compare=False)
    _burst: Retry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        finite_option(self.base_s, "backoff.base", minimum=0.0)
        finite_option(self.cap_s, "backoff.cap", minimum=self.base_s)
        finite_option(self.stable_s, "backoff.stable", minimum=0.0)
        finite_count(self.crash_loop_after, "backoff.crash_loop_after", minimum=1)
        finite_option(self.crash_window_s, "backoff.crash_window", minimum=0.0)
        finite_option(self.after_ready_cap_s, "backoff.after_ready_cap", minimum=0.0)
        finite_option(self.burst_window_s, "backoff.burst_window", minimum=0.0)
        for name, cap_s in (("_curve", self.cap_s), ("_burst", max(self.base_s, self.after_ready_cap_s))):
            object.__setattr__(self, name, Retry(attempts=10_000, delay=self.base_s * 1000.0,
                                                 max_delay=cap_s * 1000.0,
                                                 backoff="exponential", jitter=True))

    def delay(self, failures: int, rand: float | None = None) -> float:
        """Seconds to wait before the next start after ``failures`` failures in a row."""
        return _wait(self._curve, failures, rand)

    def after_ready(self, recent_exits: int, rand: float | None = None) -> float:
        """Seconds to wait after a child that had got ready died, the ``recent_exits``-th
        death of its slot within ``burst_window_s`` (this one included)."""
        return _wait(self._burst, recent_exits, rand)

    def in_crash_loop(self, failures: int, recent_exits: int = 0) -> bool:
        return failures >= self.crash_loop_after or recent_exits >= self.crash_loop_after


def _wait(curve: Retry, n: int, rand: float | None) -> float:
    if n <= 0:
        return 0.0
    draw = random.random if rand is None else (lambda: rand)
    return curve.delay_after(n, draw) / 1000.0
