"""When to start a child again after it died: exponential backoff with equal jitter.

``delay(failures)`` for the n-th consecutive failure is ``min(cap, base * 2**(n-1))``, half
of it fixed and half random, so a fleet of supervisors that lost the database together do
not reconnect in lock step. A child that served (was ready) for ``stable_s`` before it died resets
the count: one crash a day is not a crash loop. From ``crash_loop_after`` consecutive
failures on the slot is in a crash loop: reported in status, a metric and the log, and
retried at the capped delay for as long as it takes, never given up on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..options import finite_count, finite_option


@dataclass(frozen=True)
class Backoff:
    base_s: float = 0.1
    cap_s: float = 30.0
    stable_s: float = 5.0
    crash_loop_after: int = 3

    def __post_init__(self) -> None:
        finite_option(self.base_s, "backoff.base", minimum=0.0)
        finite_option(self.cap_s, "backoff.cap", minimum=self.base_s)
        finite_option(self.stable_s, "backoff.stable", minimum=0.0)
        finite_count(self.crash_loop_after, "backoff.crash_loop_after", minimum=1)

    def delay(self, failures: int, rand: float | None = None) -> float:
        """Seconds to wait before the next start after ``failures`` consecutive failures."""
        if failures <= 0:
            return 0.0
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(failures - 1, 60))
        r = random.random() if rand is None else rand
        return ceiling / 2.0 + r * ceiling / 2.0

    def failures_after(self, previous: int, uptime_s: float) -> int:
        """The consecutive-failure count once a child that ran ``uptime_s`` has died."""
        return 1 if uptime_s >= self.stable_s else previous + 1

    def in_crash_loop(self, failures: int) -> bool:
        return failures >= self.crash_loop_after
