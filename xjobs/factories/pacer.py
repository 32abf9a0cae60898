"""The pacer of a backfill: at most ``rate`` batches a second, one pacer per declaration.

The interval belongs to the table and the pool the sweep loads, not to whichever attempt holds
the run, so it is built once, at declaration, and every attempt shares it. Its wait is the
first thing inside a batch's step body (``paging.in_pages(before=...)``): a replayed batch runs
no body, so a resumed pass pays nothing for the batches it already did.

``wait(signal)`` raises ``X_ABORTED`` when the run's stop signal is set, both before the wait
and after it: the wait ends early on an abort, so its end means "the wait is over", never "the
slot arrived". The pacer checks its own rate (it is usable alone): a rate of 0, below 0, NaN,
infinite or a bool is refused, because an unchecked 0 would make the interval infinite, or,
clamped, no throttle at all.

Time is the injected ``clock`` (``xjobs.clock``), and the sleep is injectable too, so a test
steps a ``ManualClock`` instead of sleeping.
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

from ..clock import SYSTEM_CLOCK, Clock
from ..options import finite_option

MAX_RATE = 1_000_000.0     # batches a second: beyond it the interval is below a microsecond


class Signal(Protocol):
    """What the pacer needs of a run's stop signal (``ctx.signal`` is one)."""

    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def raise_if_set(self) -> None: ...


Sleep = Callable[[Signal, float], object]     # (signal, seconds): returns early once it is set


def _sleep_on_signal(signal: Signal, seconds: float) -> object:
    return signal.wait(seconds)


class Pacer:
    """Hands out one slot every ``1 / rate`` seconds; callers wait for theirs."""

    def __init__(self, rate: object, *, clock: Clock = SYSTEM_CLOCK, sleep: Sleep = _sleep_on_signal) -> None:
        self.rate = finite_option(rate, "rate", exclusive_minimum=True, maximum=MAX_RATE)
        self.interval_ms = 1000.0 / self.rate
        self._clock = clock
        self._sleep = sleep
        self._next_ms: float | None = None
        self._lock = threading.Lock()
        self.waits = 0            # slots handed out: one per batch that ran, never a replay
        self.waited_ms = 0.0      # how long those waits asked for, in total

    def wait(self, signal: Signal) -> None:
        signal.raise_if_set()
        with self._lock:
            now = self._clock.now_ms()
            at = now if self._next_ms is None else max(self._next_ms, now)
            self._next_ms = at + self.interval_ms
            self.waits += 1
            self.waited_ms += at - now
        if at > now:
            self._sleep(signal, (at - now) / 1000.0)
        signal.raise_if_set()


__all__ = ["MAX_RATE", "Pacer", "Signal", "Sleep"]
