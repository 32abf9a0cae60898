"""When to start a child again after it died, and when a slot is in a crash loop.

What the backoff protects against is a child that cannot do its work at all: an app that
fails to import, a database that refuses it, a deploy where every job kills its process.
Restarting such a child at once would only burn CPU and connections, so its FRUITLESS exits
(it never got ready, or it died without settling a single job) back off exponentially with
equal jitter, on the same curve job retries use (``retry.Retry``): ``min(cap, base *
2**(n-1))``, half fixed and half random, so a fleet that lost the database together does not
reconnect in lock step.

A child that did work and then died is started again AT ONCE: that is an outside kill (the
OOM killer, an operator, a chaos test) or a job that crashed its process, and job crashes are
dealt with per job (the suspect runs alone and is charged its attempts), not by leaving the
queue without a worker. A child that served ``stable_s`` also resets the count.

A crash loop is reported (status, ``xjobs_child_crash_loop``, the log) whenever the slot has
``crash_loop_after`` fruitless exits in a row, or that many unexpected exits of any kind
within ``crash_window_s``: a poison job crashing its process again and again shows while it
happens, even though each restart is immediate. A crash loop is never given up on.
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
    _curve: Retry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        finite_option(self.base_s, "backoff.base", minimum=0.0)
        finite_option(self.cap_s, "backoff.cap", minimum=self.base_s)
        finite_option(self.stable_s, "backoff.stable", minimum=0.0)
        finite_count(self.crash_loop_after, "backoff.crash_loop_after", minimum=1)
        finite_option(self.crash_window_s, "backoff.crash_window", minimum=0.0)
        object.__setattr__(self, "_curve", Retry(attempts=10_000, delay=self.base_s * 1000.0,
                                                 max_delay=self.cap_s * 1000.0,
                                                 backoff="exponential", jitter=True))

    def delay(self, failures: int, rand: float | None = None) -> float:
        """Seconds to wait before the next start after ``failures`` fruitless exits in a row."""
        if failures <= 0:
            return 0.0
        draw = random.random if rand is None else (lambda: rand)
        return self._curve.delay_after(failures, draw) / 1000.0

    def failures_after(self, previous: int, uptime_s: float, *, did_work: bool = False) -> int:
        """The fruitless-exit count once a child that ran ``uptime_s`` has died."""
        if did_work:
            return 0
        return 1 if uptime_s >= self.stable_s else previous + 1

    def in_crash_loop(self, failures: int, recent_exits: int = 0) -> bool:
        return failures >= self.crash_loop_after or recent_exits >= self.crash_loop_after
