"""The one interface every child actor implements, so the supervisor hosts any role alike.

A role is driven by its host's loop (``supervisor/child.py`` in a forked child, or a test
calling the methods by hand)::

    initialize() ─> ready ─> run_once(now) ... ─> stop_accepting(reason) ─> draining
                                                   (in_flight() falls to 0 or the deadline)
                                                ─> close(deadline) ─> stopped

* ``initialize()`` opens connections; nothing is opened before it (no connection crosses a fork).
* ``run_once(now_ms)`` does one pass of work and answers how many milliseconds it may sleep
  before it must be called again. The host also calls it early whenever one of
  ``wakeup_fds()`` turns readable.
* ``stop_accepting(reason, interrupt=True)`` is the accept phase: stop taking work at once
  and, unless ``interrupt`` is False (a replacement, not a drain), tell running work
  (``ctx.signal``); it must return immediately. A later call with ``interrupt=True`` still
  interrupts (a drain arriving during a replacement).
* ``close(deadline_monotonic_ms)`` is the close phase: settle what finished, abandon what did
  not by the deadline (its lease lapses and it is delivered again), release, close pools.
  It always returns, and is safe to call twice or before ``initialize()``.
* ``stats()`` is a JSON-able dict published over the pipe in every heartbeat (see
  ``workers/stats.py`` for a worker's shape); counters only grow within one process.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class Role(Protocol):
    role: str            # "worker", "scheduler" or "outbox-relay"
    queue: str | None    # the queue a worker serves; None for the others
    identity: str        # unique per process start; what the database records as claimed_by

    def initialize(self) -> None: ...
    def wakeup_fds(self) -> Sequence[int]: ...
    def run_once(self, now_ms: float) -> float: ...
    def stop_accepting(self, reason: str, interrupt: bool = True) -> None: ...
    def in_flight(self) -> int: ...
    def close(self, deadline_monotonic_ms: float | None) -> None: ...
    def stats(self) -> dict: ...
