"""Run a role in the current process: the loop waits only on the role's wake-up fds or its
timer, calls ``run_once``, and on stop goes through the same two phases as a child does.

This is how an application (or a test, or a benchmark) runs a worker without the daemon::

    worker = QueueWorker(driver=driver, registry=REGISTRY, queue="emails", concurrency=16)
    thread = InProcessHost(worker).start()
    ...
    thread.stop(deadline_s=25)
"""

from __future__ import annotations

import os
import selectors
import threading
from typing import Callable

from ..clock import monotonic_ms
from ..options import finite_option
from .role import Role


class InProcessHost:
    def __init__(self, role: Role, clock: Callable[[], float] = monotonic_ms) -> None:
        self.role = role
        self.clock = clock
        self._stop = threading.Event()
        self._stop_r, self._stop_w = None, None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._deadline_ms: float | None = None

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Loop until ``stop()`` (or ``until()`` answers True after a pass), then close."""
        self._stop_r, self._stop_w = os.pipe()
        try:
            self.role.initialize()
            with selectors.DefaultSelector() as selector:
                while not self._stop.is_set():
                    wait_ms = self.role.run_once(self.clock())
                    if until is not None and until():
                        break
                    if wait_ms <= 0:
                        continue
                    registered = [self._stop_r, *self.role.wakeup_fds()]
                    for fd in registered:
                        selector.register(fd, selectors.EVENT_READ)
                    try:
                        selector.select(wait_ms / 1000.0)
                    finally:
                        for fd in registered:
                            selector.unregister(fd)
        finally:
            self.role.stop_accepting("host stopped")
            self.role.close(self._deadline_ms)
            os.close(self._stop_r)
            os.close(self._stop_w)

    def start(self) -> "InProcessHost":
        def target() -> None:
            try:
                self.run()
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
        self._thread = threading.Thread(target=target, name=f"xjobs-host-{self.role.role}", daemon=True)
        self._thread.start()
        return self

    def stop(self, deadline_s: float | None = 30.0) -> None:
        """Drain with a deadline (None waits for every running job), then close."""
        if deadline_s is not None:
            deadline_s = finite_option(deadline_s, "deadline_s")
        self._deadline_ms = None if deadline_s is None else self.clock() + deadline_s * 1000.0
        self._stop.set()
        if self._stop_w is not None:
            try:
                os.write(self._stop_w, b"!")
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error


def drain_until_idle(role: Role, idle_passes: int = 1) -> None:
    """Run a worker in this thread until a pass claims nothing and nothing is in flight."""
    host = InProcessHost(role)
    stats = role.stats
    seen = {"claimed": -1, "quiet": 0}

    def idle() -> bool:
        snapshot = stats()
        if snapshot["in_flight"] == 0 and snapshot["claimed"] == seen["claimed"]:
            seen["quiet"] += 1
        else:
            seen["quiet"] = 0
        seen["claimed"] = snapshot["claimed"]
        return seen["quiet"] > idle_passes

    host.run(until=idle)
