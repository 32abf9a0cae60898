"""The one loop every host runs a role with: a pass, then a wait on the role's fds or its timer.

::

    ┌─> now = clock() ─> wait = role.run_once(now) ─> until()? ─yes─> True
    │                                                   │ no
    │                                                   v
    └── a wake-up fd turns readable, or min(wait, most_wait_ms, the deadline) passes
        (the deadline passed: False)

``run_once(now)`` is the only time a pass sees: the role answers how long it may sleep, and
the loop never sleeps past that, past ``most_wait_ms`` nor past the deadline. A role's fds are
asked for again before every wait (a worker's listener may reconnect under a new fd).

``drive`` is the loop for a host with nothing else to hear (the tick, ``xjobs.testing``, a
drain in this process, the tests); ``PassLoop`` is the same loop for a host that also listens
on fds of its own (a forked child's pipe and signals): ``wait`` answers which of those turned
readable, and the host handles them between passes.
"""

from __future__ import annotations

import math
import selectors
from typing import TYPE_CHECKING, Callable, Sequence

from ..clock import monotonic_ms
from .role import Role

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

_ROLE = "role"


class PassLoop:
    """One role's passes and waits, over a selector the host may add fds of its own to."""

    def __init__(self, role: Role, clock: Callable[[], float] = monotonic_ms) -> None:
        self.role = role
        self.clock = clock
        self.selector = selectors.DefaultSelector()
        self._role_fds: set[int] = set()

    def __enter__(self) -> "PassLoop":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.selector.close()

    def watch(self, fileobj: FileDescriptorLike, data: str, events: int = selectors.EVENT_READ) -> None:
        """Hear ``fileobj`` too: ``wait`` answers its key (``data``) when it is ready."""
        self.selector.register(fileobj, events, data)

    def pass_(self) -> tuple[float, float]:
        """One pass: answers its ``now`` and how long the role may sleep after it (ms)."""
        now = self.clock()
        return now, self.role.run_once(now)

    def wait(self, wait_ms: float) -> list[tuple[selectors.SelectorKey, int]]:
        """Sleep up to ``wait_ms`` or until a fd is ready; answers the host's own ready fds
        (a role's fd only ends the wait: the next pass reads it)."""
        self._sync_role_fds()
        if wait_ms <= 0 and not self.selector.get_map():
            return []
        ready = self.selector.select(max(0.0, wait_ms) / 1000.0 if math.isfinite(wait_ms) else None)
        return [(key, events) for key, events in ready if key.data != _ROLE]

    def drive(self, until: Callable[[], bool] | None = None, deadline: float | None = None,
              most_wait_ms: float = math.inf) -> bool:
        """Passes until ``until()`` holds after one (True) or ``deadline`` on the loop's clock
        passes (False). Without either it runs until the role raises."""
        while True:
            now, wait_ms = self.pass_()
            if until is not None and until():
                return True
            if deadline is not None:
                now = self.clock()
                if now >= deadline:
                    return False
                wait_ms = min(wait_ms, deadline - now)
            wait_ms = min(wait_ms, most_wait_ms)
            if wait_ms > 0:
                self.wait(wait_ms)

    def _sync_role_fds(self) -> None:
        wanted = {fd for fd in self.role.wakeup_fds() if fd is not None and fd >= 0}
        for fd in self._role_fds - wanted:
            try:
                self.selector.unregister(fd)
            except (KeyError, ValueError, OSError):
                pass
        for fd in wanted - self._role_fds:
            try:
                self.selector.register(fd, selectors.EVENT_READ, _ROLE)
            except (KeyError, ValueError, OSError):   # closed meanwhile: the next pass sees why
                wanted.discard(fd)
        self._role_fds = wanted


def drive(role: Role, *, until: Callable[[], bool] | None = None, deadline: float | None = None,
          clock: Callable[[], float] = monotonic_ms, most_wait_ms: float = math.inf,
          fds: Sequence[int] = ()) -> bool:
    """Run ``role``'s passes until ``until()`` holds after one (True) or ``deadline`` (on
    ``clock``) passes (False); ``fds``: more fds whose readiness ends a wait early."""
    with PassLoop(role, clock) as loop:
        for fd in fds:
            loop.watch(fd, "host")
        return loop.drive(until, deadline, most_wait_ms)


__all__ = ["PassLoop", "drive"]
