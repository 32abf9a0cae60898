"""The suite's one way to wait for a state it cannot be told about: poll a condition until it
answers something truthy, failing with what was awaited once the timeout passes. A test that
can be told (an event, a wake-up fd) waits on that instead."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll ``condition`` until it answers something truthy; fail naming ``what``."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
