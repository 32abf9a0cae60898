"""The child side: host one role in a forked process and speak the pipe protocol.

::

    fork ─> hello ─> initialize() ─> ready ─> run_once(now) ... heartbeat(stats) every second
                          │                        │
                          └─ fails: stopped(error), exit 1 (the supervisor backs off)
                                                   │ accept(deadline_at) | SIGTERM | pipe EOF
                                                   v
                           stop_accepting(reason) ─> draining ─> run_once until in_flight()
                           is 0 or the deadline ─> close(deadline) ─> stopped ─> exit 0

The phases are ``workers/host.Lifecycle``'s, the same for every role and for a role hosted in
this process (``InProcessHost``). The loop waits only on the pipe, the role's wake-up fds, the
signal fd and its timer.
A pipe EOF means the supervisor is gone: the child stops claiming at once, gives running work
``ORPHAN_DEADLINE_MS`` to stop, closes and exits. ``PR_SET_PDEATHSIG`` delivers SIGTERM for the
same event in case the loop is busy: the SIGTERM handler itself arms an ``alarm`` when the
parent is gone, the backstop that ends the process even while the loop is blocked in a
database call or a close never returns (the drivers' ``statement_timeout`` also unblocks such a
call): no child outlives its supervisor. Until the role is ready the death signal is SIGKILL
instead: a child still connecting holds no work.

A drain can arrive before the role is ready (the supervisor began draining while the child
was still starting): right after ``initialize()`` the pipe and the signal fd are read without
blocking, so such a child stops without claiming anything. ``accept`` carries ``interrupt``:
false for a recycle or scale-down (running jobs go on to the deadline); for a drain, and for
a reload retiring the child it replaced, what the role's policy says a drain means
(``ChildSpec.drain``), which is also what a drain the child starts itself (its own SIGTERM,
the supervisor gone) means. A later interrupting ``accept``, or ``close``, still reaches work
the first one left running.

Right after the fork the child sets ``PGAPPNAME`` to its identity, so every libpq connection
it opens without naming itself (the application's own, in job bodies) is labelled too, and the
supervisor waits for those sessions as well before handing a dead child's jobs back
(``probe.py`` says what this cannot see).
"""

from __future__ import annotations

import ctypes
import logging
import os
import selectors
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..clock import monotonic_ms
from ..workers.drive import PassLoop
from ..workers.host import Lifecycle
from ..workers.role import DrainMode, Role
from .framing import Channel, FrameError
from .messages import parent_message_problem

log = logging.getLogger("xjobs.supervisor.child")

ORPHAN_DEADLINE_MS = 500.0
_PR_SET_PDEATHSIG = 1
# an orphan ends this long after it learnt its supervisor is gone, whatever blocks it: its
# running work has ORPHAN_DEADLINE_MS of that to stop, and the rest is for its close
_ORPHAN_ALARM_S = 1.0
_SIGNAL_SOCKETS: list[socket.socket] = []
# the supervisor's own signals: blocked across the fork, unblocked in the child once its own
# handlers replace the inherited ones (which would report the signal to the supervisor)
FORK_BLOCKED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGTTIN,
                        signal.SIGTTOU, signal.SIGCHLD)


@dataclass(frozen=True)
class ChildSpec:
    """What one process start is: its slot, its fresh identity and its timings."""

    role: str
    queue: str | None
    index: int
    identity: str
    parent_pid: int
    heartbeat_ms: float = 1000.0
    drain_deadline_ms: float = 25_000.0
    drain: DrainMode = "interrupt"      # the role's policy: what a drain's accept means to it
    app: str = ""                       # the app's modules, comma-separated: which daemon in ``ps``

    @property
    def title(self) -> str:
        where = f" queue={self.queue}" if self.queue is not None else ""
        return process_title(self.app, f"{self.role}{where} #{self.index}")


def process_title(app: str, what: str) -> str:
    """``xjobsd[myapp]: worker queue=emails #2``: the app named, so ``ps`` tells daemons apart."""
    return f"xjobsd[{app}]: {what}" if app else f"xjobsd: {what}"


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send ``signum`` when the parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done: int = libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        return done == 0
    except (OSError, AttributeError):
        return False


def _alarm(seconds: float) -> None:
    """SIGALRM in ``seconds`` (whose default action ends the process), unless one armed earlier
    rings sooner: one ``setitimer`` call (no I/O, no lock), so a signal handler may use it, and
    to the millisecond where ``alarm()`` counts whole seconds."""
    left, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    if 0 < left < seconds:
        signal.setitimer(signal.ITIMER_REAL, left)   # never postpone an alarm already armed


def arm_exit_alarm(deadline_ms: float) -> None:
    """The orphan's backstop: whatever happens in ``close()``, the process ends half a second
    after its deadline."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    _alarm(deadline_ms / 1000.0 + 0.5)


def set_title(title: str) -> None:
    try:
        import setproctitle
        setproctitle.setproctitle(title)
    except ImportError:  # a nicety, never a reason to fail
        pass


class ChildHost:
    """Drives one role over one channel; ``run()`` answers the process exit code. The phases
    are ``Lifecycle``'s, shared with ``InProcessHost``; this adds the pipe, the heartbeat and
    the signals."""

    def __init__(self, channel: Channel, role: Role, spec: ChildSpec,
                 clock: Callable[[], float] = monotonic_ms, signal_fd: int | None = None,
                 backstop: Callable[[float], None] | None = None,
                 on_ready: Callable[[], None] | None = None) -> None:
        self.channel = channel
        self.on_ready = on_ready
        self.backstop = backstop if backstop is not None else arm_exit_alarm
        self.role = role
        self.spec = spec
        self.clock = clock
        self.signal_fd = signal_fd
        self.lifecycle = Lifecycle(role, spec.drain)
        self.orphaned = False
        self._lease_lost_seen = 0
        self._next_heartbeat = 0.0

    # -- messages out ----------------------------------------------------------------------------

    def _send(self, kind: str, **fields: Any) -> None:
        if not self.orphaned:
            self.channel.send({"type": kind, **fields})

    def _heartbeat(self, now: float) -> None:
        stats = self.role.stats()
        self._send("heartbeat", state=self.lifecycle.state, in_flight=self.role.in_flight(),
                   stats=stats.to_wire())
        lost = stats.job_counts().lease_lost
        if lost > self._lease_lost_seen:
            self._send("lease-lost", count=lost - self._lease_lost_seen, total=lost)
            self._lease_lost_seen = lost
        self._next_heartbeat = now + self.spec.heartbeat_ms

    # -- phases ----------------------------------------------------------------------------------

    def drain(self, deadline: float, reason: str, interrupt: bool | None = None) -> None:
        """Accept phase (``Lifecycle.drain``), told to the supervisor when it begins."""
        if self.lifecycle.drain(deadline, reason, interrupt):
            self._send("draining", in_flight=self.role.in_flight(), deadline_at=deadline)

    def _orphan(self, now: float) -> None:
        if self.orphaned:
            return
        self.orphaned = True
        log.warning("%s: the supervisor is gone; stopping", self.spec.title)
        self.drain(now + ORPHAN_DEADLINE_MS, "the supervisor exited")
        self.backstop(ORPHAN_DEADLINE_MS)

    def _on_message(self, message: dict[str, Any], now: float) -> None:
        kind = message["type"]
        if kind == "ping":
            self._heartbeat(now)
        elif kind == "accept":
            self.drain(float(message["deadline_at"]), message.get("reason", "supervisor drain"),
                       interrupt=message.get("interrupt"))
        elif kind == "close":
            deadline = float(message["deadline_at"])
            if self.lifecycle.close_now(deadline, message.get("reason", "supervisor close")):
                self._send("draining", in_flight=self.role.in_flight(), deadline_at=deadline)
        else:
            log.warning("%s: unknown message %r from the supervisor", self.spec.title, kind)

    def _on_signals(self, now: float) -> None:
        if self.signal_fd is None:
            return
        try:
            data = os.read(self.signal_fd, 512)
        except (BlockingIOError, InterruptedError):
            return
        for signum in data:
            if signum == signal.SIGTERM:
                if os.getppid() != self.spec.parent_pid:
                    self._orphan(now)
                else:
                    self.drain(now + self.spec.drain_deadline_ms, "SIGTERM to the child")

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        spec = self.spec
        self._send("hello", pid=os.getpid(), identity=spec.identity, role=spec.role,
                   queue=spec.queue, index=spec.index)
        try:
            self.lifecycle.initialize()
        except Exception as exc:
            log.error("%s: initialize failed: %s", spec.title, exc)
            self._send("stopped", error=f"initialize failed: {exc}", stats={})
            self.channel.flush_blocking(1.0)
            try:
                self.role.close(self.clock())
            except Exception:
                pass
            return 1
        if self.on_ready is not None:
            self.on_ready()
        self._send("ready", pid=os.getpid(), stats=self.role.stats().to_wire())
        with PassLoop(self.role, self.clock) as loop:
            loop.watch(self.channel.sock, "pipe")
            if self.signal_fd is not None:
                loop.watch(self.signal_fd, "signal")
            try:
                # a drain sent while the role was starting is honoured before the first claim
                self._dispatch(loop, loop.wait(0.0), self.clock())
                self._loop(loop)
            except Exception:
                log.exception("%s: the role failed; closing", spec.title)
                try:
                    self._close(at_once=True)
                except Exception:
                    log.exception("%s: close failed too", spec.title)
                return 1
        self._close()
        return 0

    def _loop(self, loop: PassLoop) -> None:
        """``PassLoop``'s passes, with the heartbeat due and the pipe heard between them."""
        lifecycle = self.lifecycle
        while not lifecycle.finished(self.clock()):
            _, wait = loop.pass_()
            now = self.clock()
            if now >= self._next_heartbeat:
                self._heartbeat(now)
            wait = lifecycle.bound_wait(min(wait, self._next_heartbeat - now), now)
            if self.channel.wants_write and not self.orphaned:
                loop.selector.modify(self.channel.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, "pipe")
            self._dispatch(loop, loop.wait(wait), now)

    def _dispatch(self, loop: PassLoop, ready: list[tuple[selectors.SelectorKey, int]], now: float) -> None:
        for key, events in ready:
            if key.data == "pipe":
                self._on_pipe(loop.selector, events, now)
            elif key.data == "signal":
                self._on_signals(now)

    def _on_pipe(self, selector: selectors.BaseSelector, events: int, now: float) -> None:
        if events & selectors.EVENT_WRITE:
            self.channel.flush()
            if not self.channel.wants_write:
                selector.modify(self.channel.sock, selectors.EVENT_READ, "pipe")
        if not events & selectors.EVENT_READ:
            return
        try:
            messages = self.channel.receive()
            for message in messages:
                problem = parent_message_problem(message)
                if problem is not None:
                    raise FrameError(problem)
        except (EOFError, FrameError) as exc:
            if isinstance(exc, FrameError):
                log.error("%s: %s from the supervisor; stopping", self.spec.title, exc)
            selector.unregister(self.channel.sock)
            self._orphan(now)
            return
        for message in messages:
            self._on_message(message, now)

    def _close(self, at_once: bool = False) -> None:
        try:
            self.lifecycle.close(self.clock(), at_once=at_once)
        finally:
            self._send("stopped", stats=self.role.stats().to_wire(), in_flight=self.role.in_flight())
            if not self.orphaned:
                self.channel.flush_blocking(1.0)


def _signal_pipe(parent_pid: int) -> int:
    """Route the signals a child cares about to a non-blocking fd; ignore the operator's."""
    r, w = socket.socketpair()
    r.setblocking(False)
    w.setblocking(False)
    signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)

    def on_term(signum: int, frame: object) -> None:
        # the wakeup fd carries the signal to the loop; this handler only arms the backstop
        # for an orphan, because the loop may be blocked in a database call and never read
        # it. SIGALRM's default action then ends the process.
        if os.getppid() != parent_pid:
            _alarm(_ORPHAN_ALARM_S)

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, on_term)
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
                   signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)   # the supervisor coordinates; Ctrl-C reaches it
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _SIGNAL_SOCKETS[:] = [r, w]   # alive for the life of the process
    return r.fileno()


def child_main(sock: socket.socket, spec: ChildSpec, make_role: Callable[[str], Role],
               after_fork: Callable[[], None] | None = None) -> None:
    """The target of a forked child; ends the process with the host's exit code."""
    # until the role is up there is nothing to drain: a parent dying then ends us outright
    set_parent_death_signal(signal.SIGKILL)
    os.environ["PGAPPNAME"] = spec.identity   # libpq connections that do not name themselves
    signal_fd = _signal_pipe(spec.parent_pid)
    # blocked by the supervisor across the fork; pending ones now reach this child's handlers
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORK_BLOCKED_SIGNALS)
    if after_fork is not None:
        after_fork()   # closes the supervisor's own fds: listeners, other children's pipes
    set_title(spec.title)
    channel = Channel(sock)
    if os.getppid() != spec.parent_pid:   # the parent died before PDEATHSIG was armed
        sys.exit(1)
    try:
        role = make_role(spec.identity)
    except Exception as exc:
        log.error("%s: could not build the role: %s", spec.title, exc)
        channel.send({"type": "stopped", "error": f"could not build the role: {exc}", "stats": {}})
        channel.flush_blocking(1.0)
        sys.exit(1)

    def graceful_from_now_on() -> None:
        set_parent_death_signal(signal.SIGTERM)   # work is held from here: drain, do not die
        if os.getppid() != spec.parent_pid:
            os.kill(os.getpid(), signal.SIGTERM)

    host = ChildHost(channel, role, spec, signal_fd=signal_fd, on_ready=graceful_from_now_on)
    sys.exit(host.run())
