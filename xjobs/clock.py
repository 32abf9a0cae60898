"""Time, injected. Every driver and actor reads ``now`` from a ``Clock`` (epoch milliseconds)
so tests step time by hand instead of sleeping or patching ``time``.

Lease-loss detection measures elapsed time on this process's monotonic clock instead
(``monotonic_ms``): a wall clock can jump, a lease window must not.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> float: ...


class SystemClock:
    def now_ms(self) -> float:
        return time.time() * 1000.0


class ManualClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start_ms: float = 1_800_000_000_000.0) -> None:
        self._now = float(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> float:
        with self._lock:
            return self._now

    def advance(self, ms: float) -> float:
        with self._lock:
            self._now += ms
            return self._now


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


SYSTEM_CLOCK = SystemClock()
