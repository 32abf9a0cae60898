"""The supervisor: one selector loop owning every child process of ``xjobsd``.

::

    starting ──children ready──> running ──SIGTERM/SIGINT/drain──> draining ──all reaped──> stopped
                                    │  ^                                │
                    SIGHUP/reload ──┘  └── SIGTTIN/SIGTTOU/scale         └─ second signal: SIGKILL all

Signal handlers only record: the C-level wakeup fd carries each signal's number into the
loop, which dispatches to ``handle_term``, ``handle_int``, ``handle_hup``, ``handle_ttin``,
``handle_ttou`` and ``handle_chld``; the control socket routes into the same methods. The
loop also wakes on the children's pipes, the control socket, the probe thread's results and
its own timers, and after every wake it reaps, checks liveness, (re)starts due slots, moves
a drain forward and publishes a snapshot for ``/metrics``.

Children are forked with ``multiprocess`` (fork context) while the arbiter holds
``fork_lock``, which the probe holds whenever it has a database connection open: no
connection is ever copied into a child. The child first closes every fd of the supervisor's
it inherited (other children's pipes, listeners, the signal fd), so a sibling can never keep
a pipe open past the supervisor's death.

Shutdown is two phases under one deadline: ``accept`` goes to every child at once (stop
claiming, signal running work), in-flight work gets until the deadline, ``close`` follows at
the deadline, and anything alive at deadline + grace is SIGKILLed. A worker child that exits
for any reason has its still-running jobs handed back by the probe once its sessions are gone.
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
from ..errors import InvalidOption, XJobsError
from ..options import finite_count
from . import report
from .backoff import Backoff
from .child import ChildSpec, child_main
from .control import ControlServer
from .framing import Channel, FrameError, pair
from .metrics import MetricsEndpoint
from .notify import Notifier
from .probe import DatabaseProbe
from .slots import Child, RoleSpec, Slot, new_identity
from .tally import Tally

log = logging.getLogger("xjobs.supervisor")

_SIGNAL_NAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGHUP: "hup",
                 signal.SIGTTIN: "ttin", signal.SIGTTOU: "ttou", signal.SIGCHLD: "chld"}
_RSS_EVERY_S = 5.0
_PUBLISH_EVERY_S = 0.25


@dataclass(frozen=True)
class ArbiterOptions:
    heartbeat_ms: float = 1000.0        # how often a child reports
    silence_s: float = 10.0             # a ready child quiet this long is killed and restarted
    startup_s: float = 60.0             # a child not ready this long after fork is killed
    kill_grace_s: float = 2.0           # after the drain deadline, before SIGKILL
    stats_interval_s: float = 5.0       # one statistics round per interval
    release_flush_s: float = 1.0        # at exit, how long pending hand-backs may take
    recycle_jobs: int | None = None     # replace a worker child after it claimed this many jobs
    recycle_rss_bytes: int | None = None
    backoff: Backoff = field(default_factory=Backoff)


class Arbiter:
    def __init__(self, settings: Settings, specs: list[RoleSpec], *,
                 options: ArbiterOptions = ArbiterOptions(),
                 configure: Callable[[], tuple[Settings, list[RoleSpec]]] | None = None,
                 probe: DatabaseProbe | None = None,
                 make_probe: Callable[..., DatabaseProbe] | None = None,
                 metrics: MetricsEndpoint | None = None,
                 control: tuple[str, socket.socket] | None = None,
                 notifier: Notifier | None = None) -> None:
        self.settings = settings
        self.options = options
        self.configure = configure
        self.fork_lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._signal_r, self._signal_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w, self._signal_r, self._signal_w):
            s.setblocking(False)
        self.probe = probe if probe is not None else (make_probe or _no_probe)(
            interval_s=options.stats_interval_s, fork_lock=self.fork_lock, wake=self._wake)
        self.metrics = metrics
        if metrics is not None:
            metrics.fork_lock = self.fork_lock
        self.control: ControlServer | None = None
        if control is not None:
            self.control = ControlServer(control[0], control[1], {
                "status": self.cmd_status, "drain": self.cmd_drain,
                "reload": self.cmd_reload, "scale": self.cmd_scale})
        self.notifier = notifier or Notifier()
        self.tally = Tally()
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
        self._released_in_drain = 0
        self._interrupted_base = 0.0
        self._reload_groups: deque[tuple] = deque()
        self._reload_current: tuple | None = None
        self._reload_specs: dict[tuple, RoleSpec] = {}
        self._spawn_deferred = False
        self._ready_sent = False
        self._next_publish = 0.0
        self._next_watchdog = 0.0
        self._next_extend = 0.0
        self._last_status_line = ""
        self._next_status_line = 0.0
        self._context = multiprocess.get_context("fork")

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until drained; answers the process exit code. No child outlives it."""
        try:
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
            while self.state != "stopped":
                self.step()
        except BaseException:
            log.exception("xjobsd %d: supervisor failed; killing every child", self.pid)
            self.exit_code = 1
            raise
        finally:
            self._teardown()
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
        if self.state == "running":
            due.extend(s.next_start for s in self.slots if s.child is None or s.want_replace)
        for child in self._children():
            if child.kill_at is not None:
                due.append(child.kill_at)
        if self.drain_deadline is not None:
            due.append(self.drain_deadline)
        return max(0.0, min(due) - now)

    # -- signals: handlers only record; the loop dispatches here --------------------------------------

    def _install(self) -> None:
        self.selector.register(self._signal_r, selectors.EVENT_READ, "signal")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        if self.control is not None:
            self.selector.register(self.control.listener, selectors.EVENT_READ, "control")
        signal.set_wakeup_fd(self._signal_w.fileno(), warn_on_full_buffer=False)
        for signum in _SIGNAL_NAMES:
            signal.signal(signum, _record)

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
        self._stop_signal("SIGTERM")

    def handle_int(self) -> None:
        self._stop_signal("SIGINT")

    def _stop_signal(self, name: str) -> None:
        if self.state in ("starting", "running"):
            self.begin_drain(f"{name} to the supervisor")
        else:
            self.kill_all(f"a second {name}")

    def handle_hup(self) -> None:
        self.reload()

    def handle_ttin(self) -> None:
        self.scale(None, delta=1)

    def handle_ttou(self) -> None:
        self.scale(None, delta=-1, floor=1)

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
        if message.get("processes") is not None:
            return self.scale(queue, processes=finite_count(message["processes"], "processes", maximum=256))
        delta = message.get("delta", 1)
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise InvalidOption("delta", f"must be a whole number, got {delta!r}")
        return self.scale(queue, delta=delta)

    # -- starting, replacing and retiring children ----------------------------------------------------

    def _add_slots(self, spec: RoleSpec, count: int) -> list[Slot]:
        taken = {s.index for s in self.slots if s.spec.key == spec.key}
        added = []
        index = 1
        while len(added) < count:
            if index not in taken:
                slot = Slot(spec, index)
                self.slots.append(slot)
                added.append(slot)
            index += 1
        return added

    def _start(self, slot: Slot, successor: bool = False) -> Child | None:
        if not self.fork_lock.acquire(blocking=False):
            self._spawn_deferred = True   # the probe holds a connection: fork on a later pass
            return None
        parent_end, child_end = pair()
        identity = new_identity(slot.spec.role)
        spec = ChildSpec(role=slot.spec.role, queue=slot.spec.queue, index=slot.index,
                         identity=identity, parent_pid=self.pid,
                         heartbeat_ms=self.options.heartbeat_ms,
                         drain_deadline_ms=self.settings.drain_deadline_ms)
        try:
            proc = self._context.Process(
                target=child_main, name=spec.title,
                args=(child_end, spec, slot.spec.make, lambda: self._close_in_child(parent_end)))
            proc.start()
        except OSError as exc:
            log.error("cannot fork %s: %s", slot.label, exc)
            parent_end.close()
            slot.next_start = time.monotonic() + self.options.backoff.delay(max(1, slot.failures))
            return None
        finally:
            self.fork_lock.release()
            child_end.close()
        now = time.monotonic()
        child = Child(slot=slot, identity=identity, proc=proc, channel=Channel(parent_end),
                      started_at=now, last_seen=now)
        self.selector.register(parent_end, selectors.EVENT_READ, child)
        if successor:
            slot.successor = child
        else:
            slot.child = child
        if self.state not in ("starting", "running"):   # a drain began meanwhile
            self._retire(child, self.drain_reason or "draining", self.drain_deadline)
        return child

    def _close_in_child(self, own_parent_end: socket.socket) -> None:
        """Runs in a fresh child: drop every fd of the supervisor it inherited."""
        own_parent_end.close()
        for child in self._children():
            child.channel.close()
        for sock in (self._wake_r, self._wake_w, self._signal_r, self._signal_w):
            sock.close()
        if self.control is not None:
            self.control.listener.close()
            for client in list(self.control.clients.values()):
                client.sock.close()
        if self.metrics is not None:
            self.metrics.close_in_child()
        self.notifier.close()
        self.selector.close()

    def _retire(self, child: Child, reason: str, deadline: float | None = None) -> None:
        """Ask one child to drain and go; its exit is then expected, not restarted."""
        if child.exit_code is not None:
            return
        now = time.monotonic()
        deadline = deadline if deadline is not None else now + self.settings.drain_deadline_ms / 1000.0
        if child.retiring is None:
            child.retiring = reason
            child.kill_at = deadline + self.options.kill_grace_s
            child.channel.send({"type": "accept", "deadline_at": deadline * 1000.0, "reason": reason})
        slot = child.slot
        if slot.child is child:
            slot.child = None
        if slot.successor is child:
            slot.successor = None
        if child not in self.retired:
            self.retired.append(child)

    def _maintain(self, now: float) -> None:
        self._spawn_deferred = False
        if self.state != "running":
            return
        self._advance_reload()
        for slot in list(self.slots):
            if now < slot.next_start:
                continue
            if slot.child is None and slot.successor is None:
                self._start(slot)
            elif slot.want_replace and slot.child is not None and slot.successor is None:
                self._start(slot, successor=True)
        if not self._ready_sent and all(s.child is not None and s.child.state == "ready" for s in self.slots):
            self._ready_sent = True
            log.info("xjobsd %d: every child is ready", self.pid)
            self.notifier.ready(report.status_line(self))

    def _on_ready(self, child: Child) -> None:
        slot = child.slot
        if slot.successor is child:
            old = slot.child
            slot.child, slot.successor = child, None
            reason, slot.want_replace = slot.want_replace or "replaced", None
            if old is not None:
                log.info("%s replaced by pid %d (%s)", old.title, child.pid, reason)
                self._retire(old, f"replaced ({reason})")

    # -- messages from children ----------------------------------------------------------------------

    def _on_child_io(self, child: Child, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            child.channel.flush()
        if mask & selectors.EVENT_READ:
            try:
                messages = child.channel.receive()
            except (EOFError, FrameError, OSError):
                self._close_channel(child)
                return
            for message in messages:
                self._on_message(child, message)
        if not child.channel.closed:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if child.channel.wants_write else 0)
            self.selector.modify(child.channel.sock, events, child)

    def _on_message(self, child: Child, message: dict) -> None:
        child.last_seen = time.monotonic()
        kind = message["type"]
        stats = message.get("stats")
        if isinstance(stats, dict) and stats:
            child.stats = stats
            self.tally.observe(child.identity, child.role, child.queue, child.slot.index, stats)
        if "in_flight" in message:
            child.in_flight = int(message["in_flight"])
        if kind == "hello":
            child.state = "starting"
        elif kind == "ready":
            child.state = "ready"
            child.ready_at = child.last_seen
            self._on_ready(child)
        elif kind == "draining":
            child.state = "draining"
        elif kind == "stopped":
            child.state = "stopped"
            child.error = message.get("error")
        elif kind == "lease-lost":
            log.warning("%s lost %s lease(s)", child.title, message.get("count"))
        elif kind == "heartbeat" and message.get("state") == "draining":
            child.state = "draining"

    def _close_channel(self, child: Child) -> None:
        if not child.channel.closed:
            try:
                self.selector.unregister(child.channel.sock)
            except (KeyError, ValueError):
                pass
            child.channel.close()

    # -- reaping and liveness ------------------------------------------------------------------------

    def _children(self) -> list[Child]:
        out = [c for slot in self.slots for c in slot.children()]
        out.extend(c for c in self.retired if c not in out)
        return out

    def _reap(self, now: float) -> None:
        for child in self._children():
            if child.exit_code is None and child.proc.exitcode is not None:
                self._on_exit(child, child.proc.exitcode, now)

    def _on_exit(self, child: Child, code: int, now: float) -> None:
        child.exit_code = code
        if not child.channel.closed:   # its last words (the final stats) may still be queued
            try:
                for message in child.channel.receive():
                    self._on_message(child, message)
            except (EOFError, FrameError, OSError):
                pass
            self._close_channel(child)
        self.tally.forget(child.identity)
        if child.role == "worker":
            self.probe.request_release(child.identity, child.queue, self.settings.lease_ms / 1000.0)
        slot = child.slot
        if child in self.retired:
            self.retired.remove(child)
        if slot.child is child:
            slot.child, slot.successor = slot.successor, None
            if slot.child is not None:
                slot.want_replace = None
        elif slot.successor is child:
            slot.successor = None
        how = _describe_exit(code, child.killed)
        if child.retiring is not None or self.state != "running":
            log.info("%s exited %s (%s)", child.title, how, child.retiring or self.state)
            return
        uptime = now - child.started_at
        backoff = self.options.backoff
        slot.failures = backoff.failures_after(slot.failures, uptime)
        slot.restarts += 1
        self.tally.add(("restarts", child.role))
        delay = backoff.delay(slot.failures)
        slot.next_start = now + delay
        slot.last_exit = how + (f": {child.error}" if child.error else "")
        crash_loop = backoff.in_crash_loop(slot.failures)
        if crash_loop and not slot.crash_loop:
            log.error("%s is in a crash loop: %d exits in a row, the last %s; retrying every %.0fs at most",
                      slot.label, slot.failures, slot.last_exit, backoff.cap_s)
        slot.crash_loop = crash_loop
        log.warning("%s exited unexpectedly %s after %.1fs; restarting in %.2fs",
                    child.title, slot.last_exit, uptime, delay)

    def _check_children(self, now: float) -> None:
        opts = self.options
        for child in self._children():
            if child.exit_code is not None:
                continue
            if child.kill_at is not None and now >= child.kill_at:
                if child.killed is None:
                    log.warning("%s still alive %.1fs after its drain deadline; SIGKILL",
                                child.title, opts.kill_grace_s)
                child.kill("drain deadline and grace passed")
                continue
            if child.retiring is not None:
                continue
            silent = now - child.last_seen
            if child.state != "ready":
                if now - child.started_at > opts.startup_s:
                    log.error("%s not ready %.0fs after start; killing it", child.title, opts.startup_s)
                    child.kill("never became ready")
                continue
            if silent > opts.silence_s:
                log.error("%s silent for %.1fs; killing it", child.title, silent)
                child.kill(f"silent for {silent:.1f}s")
                continue
            if silent > opts.silence_s / 2 and now - child.pinged_at > 1.0:
                child.pinged_at = now
                child.channel.send({"type": "ping"})
            self._check_health(child, now)

    def _check_health(self, child: Child, now: float) -> None:
        slot, opts = child.slot, self.options
        if slot.failures and child.ready_at is not None and now - child.ready_at >= opts.backoff.stable_s:
            if slot.crash_loop:
                log.info("%s is stable again", slot.label)
            slot.failures, slot.crash_loop = 0, False
        if child.role != "worker" or slot.want_replace or slot.child is not child:
            return
        if opts.recycle_jobs is not None and child.stats.get("claimed", 0) >= opts.recycle_jobs:
            slot.want_replace = f"recycled after {child.stats.get('claimed')} jobs"
        elif opts.recycle_rss_bytes is not None and now - child.rss_checked >= _RSS_EVERY_S:
            child.rss_checked = now
            rss = report.rss_bytes(child.pid)
            if rss is not None and rss > opts.recycle_rss_bytes:
                slot.want_replace = f"recycled at {rss // (1024 * 1024)} MiB resident"

    # -- drain ---------------------------------------------------------------------------------------

    def begin_drain(self, reason: str) -> None:
        """Accept phase in every child at once, under one deadline."""
        if self.state not in ("starting", "running"):
            return
        now = time.monotonic()
        self.state = "draining"
        self.drain_reason = reason
        self.drain_deadline = now + self.settings.drain_deadline_ms / 1000.0
        self._reload_groups.clear()
        self._reload_current = None
        self._interrupted_base = sum(v for k, v in self.tally.items("counter") if k[3] == "interrupted")
        self._released_in_drain = 0
        children = [c for c in self._children() if c.exit_code is None]
        log.info("draining (%s): %d child(ren), %d job(s) in flight, deadline %.1fs", reason,
                 len(children), sum(c.in_flight for c in children), self.settings.drain_deadline_ms / 1000.0)
        self.notifier.stopping(f"draining: {reason}")
        for child in children:
            self._retire(child, reason, self.drain_deadline)

    def kill_all(self, reason: str) -> None:
        self.state = "killing"
        live = [c for c in self._children() if c.exit_code is None]
        log.warning("%s: SIGKILL to %d child(ren)", reason, len(live))
        for child in live:
            child.kill(reason)

    def _progress_drain(self, now: float) -> None:
        if self.state not in ("draining", "killing"):
            return
        live = [c for c in self._children() if c.exit_code is None]
        if self.drain_deadline is not None and now >= self.drain_deadline:
            for child in live:
                if child.state not in ("stopped", "closing") and child.killed is None and not getattr(child, "close_sent", False):
                    child.close_sent = True   # type: ignore[attr-defined]
                    child.channel.send({"type": "close", "deadline_at": now * 1000.0, "reason": "drain deadline"})
        if live:
            if now >= self._next_extend:
                self._next_extend = now + 5.0
                last = max((c.kill_at or now) for c in live)
                self.notifier.extend_timeout(max(0.0, last - now) + 10.0)
            return
        self.probe.flush_releases(self.options.release_flush_s)
        self._apply_probe_results()
        interrupted = sum(v for k, v in self.tally.items("counter") if k[3] == "interrupted") - self._interrupted_base
        log.info("drained: %d run(s) interrupted and back to ready, %d abandoned run(s) handed back%s",
                 interrupted, self._released_in_drain,
                 f", {self.probe.pending_releases} left to their lease" if self.probe.pending_releases else "")
        self.state = "stopped"

    # -- reload and scale ---------------------------------------------------------------------------

    def reload(self) -> dict:
        if self.state != "running":
            return {"ok": False, "error": f"cannot reload while {self.state}"}
        if self.configure is None:
            return {"ok": False, "error": "this supervisor has no configuration to re-read"}
        try:
            settings, specs = self.configure()
        except XJobsError as exc:
            log.error("reload refused, keeping the running configuration: %s", exc)
            return {"ok": False, "error": str(exc)}
        if (settings.metrics, settings.control) != (self.settings.metrics, self.settings.control):
            log.warning("reload: the metrics and control addresses change only at the next start")
        self.settings = settings
        self._reload_specs = {spec.key: spec for spec in specs}
        keys = {s.spec.key for s in self.slots} | set(self._reload_specs)
        self._reload_groups = deque(sorted(keys, key=lambda k: (k[0], k[1] or "")))
        self._reload_current = None
        log.info("reloading configuration: replacing %d role group(s) one at a time", len(keys))
        return {"ok": True, "groups": [f"{role} {queue or ''}".strip() for role, queue in self._reload_groups]}

    def _advance_reload(self) -> None:
        while True:
            current = self._reload_current
            if current is not None and any(s.want_replace for s in self.slots if s.spec.key == current):
                return
            if not self._reload_groups:
                if current is not None:
                    log.info("reload complete")
                    self._reload_current = None
                return
            key = self._reload_current = self._reload_groups.popleft()
            spec = self._reload_specs.get(key)
            slots = sorted((s for s in self.slots if s.spec.key == key), key=lambda s: s.index)
            if spec is None:
                for slot in slots:
                    self._remove_slot(slot, "removed from the configuration")
                continue
            for slot in slots[:spec.processes]:
                slot.spec = spec
                slot.want_replace = "configuration reloaded"
            for slot in slots[spec.processes:]:
                self._remove_slot(slot, "removed from the configuration")
            if len(slots) < spec.processes:
                self._add_slots(spec, spec.processes - len(slots))

    def _remove_slot(self, slot: Slot, reason: str) -> None:
        if slot in self.slots:
            self.slots.remove(slot)
        for child in slot.children():
            self._retire(child, reason)

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              floor: int = 0) -> dict:
        if self.state != "running":
            return {"ok": False, "error": f"cannot scale while {self.state}"}
        specs = {s.spec.key: s.spec for s in self.slots if s.spec.role == "worker"}
        chosen = [spec for key, spec in specs.items() if queue is None or key[1] == queue]
        if not chosen:
            raise InvalidOption("queue", f"no worker queue named {queue!r}; running: "
                                         f"{', '.join(sorted(k[1] for k in specs)) or 'none'}")
        result = {}
        for spec in chosen:
            slots = sorted((s for s in self.slots if s.spec.key == spec.key), key=lambda s: s.index)
            target = processes if processes is not None else len(slots) + (delta or 0)
            target = max(floor, min(256, target))
            if target > len(slots):
                self._add_slots(spec, target - len(slots))
            for slot in reversed(slots[target:]):
                self._remove_slot(slot, "scaled down")
            spec.processes = target
            result[spec.queue] = target
            if target != len(slots):
                log.info("queue %s scaled from %d to %d process(es)", spec.queue, len(slots), target)
        return {"ok": True, "processes": result}

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
                _, identity, queue, count = result
                self.database_up = True
                if count:
                    self.tally.add(("released", queue or ""), count)
                    log.info("handed back %d running job(s) of %s (queue %s)", count, identity, queue)
                    if self.state != "running":
                        self._released_in_drain += count
            elif kind == "abandoned":
                log.warning("sessions of %s outlived the lease window; its jobs are left to the lease",
                            result[1])
        if self.probe.reachable is not None:
            self.database_up = self.probe.reachable

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
            if self.notifier.watchdog_s and now >= self._next_watchdog and report.healthy(self):
                self._next_watchdog = now + self.notifier.watchdog_s / 2.0
                self.notifier.watchdog()

    def _drop_client(self, conn: socket.socket) -> None:
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        self.control.drop(conn)

    def _teardown(self) -> None:
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
        signal.set_wakeup_fd(-1)
        for signum in _SIGNAL_NAMES:
            signal.signal(signum, signal.SIG_DFL)
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


def _describe_exit(code: int, killed: str | None) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"by {name}" + (f" ({killed})" if killed else "")
    return f"with code {code}"


class _NullProbe:
    reachable = None
    pending_releases = 0

    def start(self) -> None: ...
    def stop(self, timeout_s: float = 0) -> None: ...
    def request_release(self, identity: str, queue: str | None, within_s: float) -> None: ...
    def refresh(self) -> None: ...
    def flush_releases(self, timeout_s: float) -> None: ...
    def results(self) -> list: return []


def _no_probe(**_: Any) -> Any:
    return _NullProbe()
