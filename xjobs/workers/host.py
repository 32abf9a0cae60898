"""Hosting a role: the phases every host drives it through, and a host for this process.

``Lifecycle`` is those phases, in one place, for both hosts (``supervisor/child.py`` in a
forked child, ``InProcessHost`` here)::

    starting ─initialize()─> ready ─drain(deadline)─> draining ─finished()─> close() ─> stopped
                                                      (in_flight() is 0, the deadline passed,
                                                       or close_now())

A drain's accept phase calls ``stop_accepting`` once, interrupting running work when the
role's policy says a drain does (``RolePolicy.drain``) or when the caller says so; a later
interrupting drain still reaches work the first left running, and only ever brings the
deadline closer. While draining the host keeps calling ``run_once`` (to settle what finishes)
at least every ``DRAIN_POLL_MS``, then closes with the deadline.

``InProcessHost`` is how an application (or a test, or a benchmark) runs a role without the
daemon::

    worker = QueueWorker(driver=driver, registry=REGISTRY, queue="emails", concurrency=16)
    thread = InProcessHost(worker).start()
    ...
    thread.stop(deadline_s=25)
"""

from __future__ import annotations

import math
import os
import threading
from typing import Callable

from ..clock import monotonic_ms
from ..options import finite_option
from .drive import drive
from .role import DrainMode, Role

DRAIN_POLL_MS = 50.0


class Lifecycle:
    """The state of one role under one host; every method runs on the host's loop thread."""

    def __init__(self, role: Role, drain: DrainMode = "interrupt") -> None:
        self.role = role
        self.drain_mode = drain
        self.state = "starting"
        self.deadline: float | None = None      # set once draining
        self.interrupted = False                # whether the drain told running work to stop
        self.force_close = False

    def initialize(self) -> None:
        self.role.initialize()
        self.state = "ready"

    def drain(self, deadline: float, reason: str, interrupt: bool | None = None) -> bool:
        """Accept phase: stop taking work now; in-flight work has until ``deadline``, and is
        told to stop early when ``interrupt`` (by default: when the policy's drain interrupts).
        Answers True when this call began the drain."""
        if interrupt is None:
            interrupt = self.drain_mode == "interrupt"
        if self.deadline is None:
            self.state = "draining"
            self.deadline = deadline
            self.interrupted = interrupt
            self.role.stop_accepting(reason, interrupt=interrupt, deadline_ms=_finite(deadline))
            return True
        self.deadline = min(self.deadline, deadline)
        if interrupt and not self.interrupted:
            self.interrupted = True
            self.role.stop_accepting(reason, interrupt=True, deadline_ms=_finite(self.deadline))
        return False

    def close_now(self, deadline: float, reason: str) -> bool:
        """The close phase was asked for: whatever runs is told to stop, and the loop ends."""
        began = self.drain(deadline, reason, interrupt=True)
        self.force_close = True
        return began

    def finished(self, now: float) -> bool:
        """Whether the loop is done: draining, and nothing in flight or no time left."""
        return self.deadline is not None and (self.force_close or now >= self.deadline
                                              or self.role.in_flight() == 0)

    def bound_wait(self, wait_ms: float, now: float) -> float:
        """How long the loop may sleep: while draining, never past the deadline nor a poll."""
        if self.deadline is not None:
            wait_ms = min(wait_ms, self.deadline - now, DRAIN_POLL_MS)
        return max(0.0, wait_ms)

    def close(self, now: float, *, at_once: bool = False) -> None:
        """Close phase, with the drain's deadline; ``now`` when there was no drain, or
        ``at_once`` (the role failed: nothing more is waited for)."""
        if self.deadline is None:
            self.role.stop_accepting("closing")
        deadline = self.deadline if self.deadline is not None and not at_once else now
        self.state = "closing"
        try:
            self.role.close(None if math.isinf(deadline) else deadline)
        finally:
            self.state = "stopped"


class InProcessHost:
    """Loops one role on a thread of this process: waits only on the role's wake-up fds or its
    timer, and on ``stop()`` goes through the same phases as a child does."""

    def __init__(self, role: Role, clock: Callable[[], float] = monotonic_ms, *,
                 drain: DrainMode = "interrupt") -> None:
        self.role = role
        self.clock = clock
        self.lifecycle = Lifecycle(role, drain)
        self._stop = threading.Event()
        self._stop_r: int | None = None
        self._stop_w: int | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._deadline_ms: float | None = None
        self._interrupt = False      # a manual stop tells running work nothing (see stop)

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Loop until ``stop()`` (or ``until()`` answers True after a pass), then drain and close."""
        self._stop_r, self._stop_w = stop_r, stop_w = os.pipe()
        lifecycle = self.lifecycle
        failed = True
        try:
            lifecycle.initialize()
            if not self._stop.is_set():
                def stopped() -> bool:
                    return self._stop.is_set() or (until is not None and until())
                drive(self.role, until=stopped, clock=self.clock, fds=[stop_r])
            deadline = self._deadline_ms
            wind_down(lifecycle, self.clock, math.inf if deadline is None else deadline, "host stopped",
                      interrupt=self._interrupt)
            failed = False
        finally:
            if failed and lifecycle.deadline is None:   # run_once raised: no drain, straight to close
                lifecycle.drain(math.inf if self._deadline_ms is None else self._deadline_ms, "host stopped")
            if lifecycle.state != "stopped":
                lifecycle.close(self.clock())
            os.close(stop_r)
            os.close(stop_w)

    def start(self) -> "InProcessHost":
        def target() -> None:
            try:
                self.run()
            except BaseException as exc:  # surfaced by stop()
                self.error = exc
        self._thread = threading.Thread(target=target, name=f"xjobs-host-{self.role.role}", daemon=True)
        self._thread.start()
        return self

    def stop(self, deadline_s: float | None = None, *, interrupt: bool = False) -> None:
        """Stop taking work, wait for what runs, then close. A manual stop aborts nothing: the
        running jobs finish (a deadline is opt-in: what still runs then is handed back one
        lease window later, its attempt not counted; ``interrupt=True`` also tells them to stop
        early, as a drain does)."""
        if deadline_s is not None:
            deadline_s = finite_option(deadline_s, "deadline_s")
        self._deadline_ms = None if deadline_s is None else self.clock() + deadline_s * 1000.0
        self._interrupt = bool(interrupt)
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


class Lent:
    """The caller's driver, lent to a role: a role closes its driver as it closes (a child
    owns its own), but a caller hosting roles in its process (a tick, a test) keeps using
    this one after. Every other verb is the lent driver's own (``__getattr__``), so this is a
    ``JobDriver`` whatever the driver is."""

    def __init__(self, driver: object) -> None:
        self._driver = driver

    def __getattr__(self, name: str) -> object:
        return getattr(self._driver, name)

    def close(self) -> None:
        """The caller's to do, when it is done with the driver."""


def wind_down(lifecycle: Lifecycle, clock: Callable[[], float], deadline: float, reason: str,
              interrupt: bool | None = None) -> None:
    """A drain to ``deadline`` (on ``clock``) and the close after it, as every host does them:
    the accept phase, passes until nothing is in flight or the deadline, then the close (also
    when a pass raises: what the role holds is let go of either way)."""
    lifecycle.drain(deadline, reason, interrupt)
    try:
        drive(lifecycle.role, until=lambda: lifecycle.finished(clock()), clock=clock,
              deadline=_finite(lifecycle.deadline if lifecycle.deadline is not None else deadline),
              most_wait_ms=DRAIN_POLL_MS)
    finally:
        lifecycle.close(clock())


def _finite(deadline: float) -> float | None:
    return deadline if math.isfinite(deadline) else None
