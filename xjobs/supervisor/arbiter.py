"""The supervisor: one selector loop owning every child process of ``xjobsd``.

::

    starting ──children ready──> running ──SIGTERM/SIGINT/drain──> draining ──all reaped──> stopped
                                    │  ^                                │
                    SIGHUP/reload ──┘  └── SIGTTIN/SIGTTOU/scale         └─ second stop signal: SIGKILL all

Signal handlers only record: the C-level wakeup fd carries each signal's number into the
loop, which dispatches to ``handle_term``, ``handle_int``, ``handle_hup``, ``handle_ttin``,
``handle_ttou`` and ``handle_chld``; the control socket routes into the same methods. The
loop also wakes on the children's pipes, the control socket, the probe thread's results and
its own timers, and after every wake it reaps, checks liveness, (re)starts due slots, moves
a drain forward and publishes a snapshot for ``/metrics``.

Children are forked with ``multiprocess`` (fork context) while the arbiter holds
``fork_lock``, which the probe holds whenever it has a database connection open (a child
finalising a copied psycopg connection would end the parent's session), and only then; the
probe's rounds are bounded so a fork waits seconds at most. The HTTP thread serves without
it: a connection being served when a fork happens is only an extra fd reference in the
child, which drops it (closing a duplicate fd sends nothing). The child first closes every
fd of the supervisor's it inherited (other children's pipes, listeners, the signal fd), so a
sibling can never keep a pipe open past the supervisor's death.

Shutdown is two phases under one deadline (``draining.py``). A worker child that exits for
any reason has its still-running jobs handed back by the probe once its sessions are gone.
``WATCHDOG=1`` flows while the loop turns; a slot in a crash loop is reported (status line,
``xjobsd status``, metrics, log) but does not stop the watchdog: restarting the whole daemon
would not mend a child that cannot start.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import multiprocess

from ..config import Settings
from ..errors import InvalidOption
from ..options import finite_count
from . import report
from .backoff import Backoff
from .child import set_title
from .control import ControlServer
from .draining import Draining
from .metrics import MetricsEndpoint
from .notify import Notifier
from .probe import DatabaseProbe, no_probe
from .reshape import Reshape
from .slots import Child, RoleSpec, Slot
from .supervision import Supervision
from .tally import Tally

log = logging.getLogger("xjobs.supervisor")

_SIGNAL_NAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGHUP: "hup",
                 signal.SIGTTIN: "ttin", signal.SIGTTOU: "ttou", signal.SIGCHLD: "chld"}
_PUBLISH_EVERY_S = 0.25


@dataclass(frozen=True)
class ArbiterOptions:
    heartbeat_ms: float = 1000.0        # how often a child reports
    silence_s: float = 10.0             # a ready child quiet this long (and at least a lease) is killed
    startup_s: float = 60.0             # a child not ready this long after fork is killed
    kill_grace_s: float = 2.0           # after the drain deadline, before SIGKILL
    stats_interval_s: float = 5.0       # one statistics round per interval
    release_flush_s: float = 1.0        # at exit, how long pending hand-backs may take
    recycle_jobs: int | None = None     # replace a worker child after it claimed this many jobs
    recycle_rss_bytes: int | None = None
    backoff: Backoff = field(default_factory=Backoff)


class Arbiter(Supervision, Reshape, Draining):
    def __init__(self, settings: Settings, specs: list[RoleSpec], *,
                 options: ArbiterOptions = ArbiterOptions(),
                 configure: Callable[[], tuple[Settings, list[RoleSpec]]] | None = None,
                 probe: DatabaseProbe | None = None,
                 make_probe: Callable[..., DatabaseProbe] | None = None,
                 metrics: MetricsEndpoint | None = None,
                 control: tuple[str, socket.socket] | None = None,
                 notifier: Notifier | None = None,
                 registered: dict[str, list[str]] | None = None,
                 make_worker_spec: Callable[[str, int, int], RoleSpec] | None = None) -> None:
        self.settings = settings
        self.options = options
        self.configure = configure
        self.registered = registered or {}   # queue -> job names the app declares
        self.make_worker_spec = make_worker_spec   # how scale adds a declared queue at runtime
        self.fork_lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._signal_r, self._signal_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w, self._signal_r, self._signal_w):
            s.setblocking(False)
        self.probe = probe if probe is not None else (make_probe or no_probe)(
            interval_s=options.stats_interval_s, fork_lock=self.fork_lock, wake=self._wake)
        self.metrics = metrics
        self.control: ControlServer | None = None
        if control is not None:
            self.control = ControlServer(control[0], control[1], {
                "status": self.cmd_status, "drain": self.cmd_drain,
                "reload": self.cmd_reload, "scale": self.cmd_scale})
        self.notifier = notifier or Notifier()
        self.tally = Tally()
        self.specs: dict[tuple, RoleSpec] = {spec.key: spec for spec in specs}
        self.slots: list[Slot] = []
        for spec in specs:
            self._add_slots(spec, spec.processes)
        self.retired: list[Child] = []
        self.state = "starting"
        self.started_at = time.monotonic()
        self.pid = os.getpid()
        self.exit_code = 0
        self.summary: Any = None            # the probe's latest statistics round
        self.database_up: bool | None = None
        self.drain_deadline: float | None = None
        self.drain_reason: str | None = None
        self._signals: deque[int] = deque()
        self._stop_signals = 0
        self._last_stop_signal: tuple[str, float] | None = None   # (name, when), to count repeats once
        self._previous_handlers: dict[int, Any] = {}
        self._previous_wakeup_fd = -1
        self._released_in_drain = 0
        self._interrupted_base = 0.0
        self._abandoned_base = 0.0
        self._reload_groups: deque[tuple] = deque()
        self._reload_current: tuple | None = None
        self._reload_specs: dict[tuple, RoleSpec] = {}
        self._reloading = False
        self.reload_generation = 0
        self._spawn_deferred = False
        self._ready_sent = False
        self._next_publish = 0.0
        self._next_watchdog = 0.0
        self._next_extend = 0.0
        self._last_status_line = ""
        self._next_status_line = 0.0
        self._context = multiprocess.get_context("fork")

    # -- the loop ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Install the signal fd, fork every slot's child, then start the threads."""
        self._install()
        for slot in self.slots:
            self._start(slot)
        self.state = "running"
        if self.metrics is not None:
            self.metrics.start()
        self.probe.start()   # only now: no database connection exists before the forks
        log.info("xjobsd %d: supervising %d child process(es)%s%s", self.pid, len(self.slots),
                 f"; metrics on http://{self.metrics.address}/metrics" if self.metrics else "",
                 f"; control socket {self.control.path}" if self.control else "")

    def run(self) -> int:
        """Supervise until drained; answers the process exit code. No child outlives it."""
        try:
            set_title("xjobsd: supervisor")
            self.start()
            while self.state != "stopped":
                self.step()
        except BaseException:
            log.exception("xjobsd %d: supervisor failed; killing every child", self.pid)
            self.exit_code = 1
            raise
        finally:
            self.close()
        return self.exit_code

    def step(self, timeout: float | None = None) -> None:
        """One pass: wait for something, then reap, check, start, drain and publish."""
        for key, mask in self.selector.select(self._next_wake() if timeout is None else timeout):
            data = key.data
            if data == "signal":
                self._read_signals()
            elif data == "wake":
                _drain_socket(self._wake_r)
            elif data == "control":
                for conn in self.control.accept():
                    self.selector.register(conn, selectors.EVENT_READ, ("client", conn))
            elif isinstance(data, tuple) and data[0] == "client":
                if self.control.readable(data[1]):
                    self._drop_client(data[1])
            elif isinstance(data, Child):
                self._on_child_io(data, mask)
        now = time.monotonic()
        if self.control is not None:
            for conn in self.control.expired(now):
                self._drop_client(conn)
        while self._signals:
            signum = self._signals.popleft()
            getattr(self, f"handle_{_SIGNAL_NAMES[signum]}")()
        self._apply_probe_results()
        self._reap(now)
        self._check_children(now)
        self._maintain(now)
        self._progress_drain(now)
        self._publish(now)

    def _next_wake(self) -> float:
        now = time.monotonic()
        due = [now + 1.0]
        if self._spawn_deferred:
            due.append(now + 0.02)
        if self.state == "running":   # slots waiting out a backoff (due ones started this pass)
            due.extend(s.next_start for s in self.slots if s.next_start > now and s.successor is None
                       and (s.child is None or s.want_replace))
        for child in self._children():
            if child.kill_at is not None and child.killed is None:
                due.append(child.kill_at)
        if self.drain_deadline is not None and self.drain_deadline > now:
            due.append(self.drain_deadline)
        return max(0.0, min(due) - now)

    def unserved(self) -> dict[str, list[str]]:
        """Declared jobs whose queue no worker of this daemon serves (now: scale may add one)."""
        served = {queue for (role, queue) in self.specs if role == "worker"}
        return {queue: names for queue, names in self.registered.items() if queue not in served}

    # -- signals: handlers only record; the loop dispatches here --------------------------------------

    def _install(self) -> None:
        self.selector.register(self._signal_r, selectors.EVENT_READ, "signal")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if self.control is not None:
            self.selector.register(self.control.listener, selectors.EVENT_READ, "control")
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._signal_w.fileno(), warn_on_full_buffer=False)
        for signum in _SIGNAL_NAMES:
            self._previous_handlers[signum] = signal.signal(signum, _record)

    def _read_signals(self) -> None:
        while True:
            try:
                data = self._signal_r.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            self._signals.extend(n for n in data if n in _SIGNAL_NAMES)

    def handle_term(self) -> None:
        self._stop_signal("SIGTERM", time.monotonic())

    def handle_int(self) -> None:
        self._stop_signal("SIGINT", time.monotonic())

    def handle_hup(self) -> None:
        self.reload()

    def handle_ttin(self) -> None:
        self._scale_signal("SIGTTIN", +1)

    def handle_ttou(self) -> None:
        self._scale_signal("SIGTTOU", -1)

    def _scale_signal(self, name: str, delta: int) -> None:
        # a signal has nobody to answer: it clamps (1..MAX_PROCESSES) where a command refuses
        try:
            self.scale(None, delta=delta, clamp=True)
        except InvalidOption as exc:   # no worker queue at all: nothing to scale
            log.warning("%s ignored: %s", name, exc)

    def handle_chld(self) -> None:
        self._reap(time.monotonic())

    # -- control commands: one small handler each --------------------------------------------------

    def cmd_status(self, message: dict) -> dict:
        return {"ok": True, **report.status(self, time.monotonic())}

    def cmd_drain(self, message: dict) -> dict:
        if self.state not in ("starting", "running"):
            return {"ok": False, "error": f"already {self.state}"}
        self.begin_drain("drain requested over the control socket")
        return {"ok": True, "state": self.state, "deadline_seconds": self.settings.drain_deadline_ms / 1000.0}

    def cmd_reload(self, message: dict) -> dict:
        return self.reload()

    def cmd_scale(self, message: dict) -> dict:
        queue = message.get("queue")
        if queue is not None and not isinstance(queue, str):
            raise InvalidOption("queue", "must be a queue name")
        allow_zero = message.get("allow_zero", False)
        if not isinstance(allow_zero, bool):
            raise InvalidOption("allow_zero", f"must be true or false, got {allow_zero!r}")
        concurrency = message.get("concurrency")
        if concurrency is not None:
            concurrency = finite_count(concurrency, "concurrency", minimum=1, maximum=10_000)
        if message.get("processes") is not None:
            processes = finite_count(message["processes"], "processes")
            return self.scale(queue, processes=processes, allow_zero=allow_zero, concurrency=concurrency)
        delta = message.get("delta", 1)
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise InvalidOption("delta", f"must be a whole number, got {delta!r}")
        return self.scale(queue, delta=delta, allow_zero=allow_zero, concurrency=concurrency)

    # -- the probe, publishing, teardown -------------------------------------------------------------

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"!")
        except (BlockingIOError, OSError):
            pass

    def _apply_probe_results(self) -> None:
        for result in self.probe.results():
            kind = result[0]
            if kind == "summary":
                self.summary = result[1]
                self.database_up = True
            elif kind == "error":
                self.database_up = False
            elif kind == "released":
                _, identity, queue, released = result
                self.database_up = True
                if released:
                    self._on_released(identity, queue, released)
            elif kind == "abandoned":
                log.warning("sessions of %s outlived the lease window; its jobs are left to the lease",
                            result[1])
        if self.probe.reachable is not None:
            self.database_up = self.probe.reachable

    def _on_released(self, identity: str, queue: str | None, released: list) -> None:
        """Count what a dead child's hand-back did; a crash's verdicts are logged per job."""
        self.tally.add(("released", queue or ""), len(released))
        outcomes: dict[str, int] = {}
        for job in released:
            outcomes[job.outcome] = outcomes.get(job.outcome, 0) + 1
            if job.outcome == "dead":
                self.tally.add(("jobs", job.queue, job.name, "dead"))
            if job.outcome in ("dead", "crashed"):
                log.warning("job %s#%s crashed its worker process %s alone%s", job.name, job.id,
                            identity, "; dead-lettered on its last attempt" if job.outcome == "dead"
                            else "; attempt counted")
        summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
        log.info("handed back %d running job(s) of %s (queue %s): %s", len(released), identity, queue, summary)
        if self.state != "running":
            self._released_in_drain += len(released)

    def _publish(self, now: float) -> None:
        if now < self._next_publish and self.state == "running":
            return
        self._next_publish = now + _PUBLISH_EVERY_S
        snapshot = report.snapshot(self, now)
        if self.metrics is not None:
            self.metrics.publish(snapshot)
        if self.notifier.enabled:
            if now >= self._next_status_line:
                self._next_status_line = now + 2.0
                line = report.status_line(self)
                if line != self._last_status_line:
                    self._last_status_line = line
                    self.notifier.status(line)
            if self.notifier.watchdog_s and now >= self._next_watchdog and report.loop_healthy(self):
                self._next_watchdog = now + self.notifier.watchdog_s / 2.0
                self.notifier.watchdog()

    def _drop_client(self, conn: socket.socket) -> None:
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        self.control.drop(conn)

    def close(self) -> None:
        """Kill whatever is still alive, stop the threads, give back every fd and signal."""
        live = [c for c in self._children() if c.exit_code is None]
        for child in live:
            child.kill("the supervisor is exiting")
        for child in live:
            child.proc.join(5.0)
        self.probe.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.control is not None:
            for conn in list(self.control.clients.values()):
                self._drop_client(conn.sock)
            self.control.close()
        if self._previous_handlers:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self._previous_handlers = {}
        self.selector.close()
        for sock in (self._wake_r, self._wake_w, self._signal_r, self._signal_w):
            sock.close()
        self.notifier.close()


def _record(signum: int, frame: Any) -> None:
    """Installed for every handled signal: the wakeup fd already carries the number."""


def _drain_socket(sock: socket.socket) -> None:
    try:
        while sock.recv(4096):
            pass
    except (BlockingIOError, InterruptedError, OSError):
        pass
