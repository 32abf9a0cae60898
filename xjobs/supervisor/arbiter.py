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

Children are forked under ``fork_lock``, which the probe holds only while it has a database
connection open (``spawn.py``). The HTTP thread serves without it: a connection being served
when a fork happens is only an extra fd reference in the child, which drops it at once with
every other supervisor fd it inherited, so a sibling never keeps a pipe open past the
supervisor's death.

The arbiter keeps the loop, the signals, the control commands, the probe's results and what
it publishes; the rest is done by collaborators it owns, each with its own state:

* ``self.processes`` (``processes.py``): the slots, their children, and spawning, replacing,
  retiring, reaping and watching them;
* ``self.reloader`` (``reload.py``): a reload's validation in a fresh process and the app's
  second import, which end in a plan for
* ``self.reshaper`` (``reshape.py``): reload and scale, which change the slots;
* ``self.drain`` (``draining.py``): the two phases of a shutdown under one deadline.

None of them knows a role by its name: what happens around a child is read from its role's
``RolePolicy`` (``workers/role.py``). A child whose role hands back jobs (the workers) has its
still-running jobs handed back by the probe once its sessions are gone, whatever ended it.
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
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import Settings
from ..errors import InvalidOption
from . import report
from .backoff import Backoff
from .child import process_title, set_title
from .control import ControlServer, Deferred, scale_request
from .draining import Drain
from .handback import count_handback
from .metrics import MetricsEndpoint
from .notify import Notifier
from .probe import Abandoned, HandedBack, Probe, Summary, Unreachable, no_probe
from .processes import ProcessTable
from .reload import Configuration, Reloader
from .reshape import MakeQueueSpecs, Reshaper
from .signals import SignalQueue, WakeUp
from .slots import Child, RoleSpec
from .tally import Tally
from .validate import DEADLINE_S

log = logging.getLogger("xjobs.supervisor")

_SIGNAL_NAMES = {signal.SIGTERM: "term", signal.SIGINT: "int", signal.SIGHUP: "hup",
                 signal.SIGTTIN: "ttin", signal.SIGTTOU: "ttou", signal.SIGCHLD: "chld"}


@dataclass(frozen=True)
class ArbiterOptions:
    heartbeat_ms: float = 1000.0        # how often a child reports
    silence_s: float = 10.0             # a ready child quiet this long (and at least a lease) is killed
    startup_s: float = 60.0             # a child not ready this long after fork is killed
    kill_grace_s: float = 2.0           # after the drain deadline, before SIGKILL
    stats_interval_s: float = 5.0       # one statistics round per interval
    release_flush_s: float = 1.0        # at exit, how long pending hand-backs may take
    recycle_jobs: int | None = None     # replace a recyclable child after it claimed this many jobs
    recycle_rss_bytes: int | None = None
    validation_s: float = DEADLINE_S    # how long a reload's fresh import of the app may take
    backoff: Backoff = field(default_factory=Backoff)


class Arbiter:
    def __init__(self, settings: Settings, specs: list[RoleSpec], *,
                 options: ArbiterOptions = ArbiterOptions(),
                 configuration: Configuration | None = None,
                 probe: Probe | None = None,
                 make_probe: Callable[..., Probe] | None = None,
                 metrics: MetricsEndpoint | None = None,
                 control: tuple[str, socket.socket] | None = None,
                 notifier: Notifier | None = None,
                 registered: dict[str, list[str]] | None = None,
                 make_queue_specs: MakeQueueSpecs | None = None) -> None:
        self.options = options
        self.fork_lock = threading.Lock()
        self.selector = selectors.DefaultSelector()
        self.wake = WakeUp()                 # how the probe's thread gets the loop to look
        self.signals = SignalQueue(_SIGNAL_NAMES)
        # the probe connects with the running settings, which a reload replaces
        self.probe: Probe = probe if probe is not None else (make_probe or no_probe)(
            interval_s=options.stats_interval_s, fork_lock=self.fork_lock, wake=self.wake,
            settings=lambda: self.settings)
        self.metrics = metrics
        self.control: ControlServer | None = None
        if control is not None:
            self.control = ControlServer(control[0], control[1], {
                "status": self.cmd_status, "drain": self.cmd_drain,
                "reload": self.cmd_reload, "scale": self.cmd_scale})
        self.notifier = notifier or Notifier()
        self.tally = Tally()
        self.processes = ProcessTable(settings, options, specs, selector=self.selector,
                                      fork_lock=self.fork_lock, probe=self.probe, tally=self.tally,
                                      after_fork=self._close_in_child)
        app = configuration.app if configuration is not None else None
        self.reshaper = Reshaper(self.processes, image=app.image if app is not None else None,
                                 registered=registered, make_queue_specs=make_queue_specs)
        self.reloader = Reloader(self.reshaper, configuration, deadline_s=options.validation_s,
                                 wake=self.wake, on_planned=self._reload_planned)
        self.drain = Drain(self.processes, self.tally, self.notifier)
        self._phase = "starting"            # then running; from a drain on, the drain's phase
        self.started_at = time.monotonic()
        self.pid = os.getpid()
        self.exit_code = 0
        self.summary: Summary | None = None   # the probe's latest statistics round
        self.database_up: bool | None = None
        self.publisher = report.Publisher(metrics, self.notifier)
        self._ready_sent = False

    @property
    def state(self) -> str:
        """starting, running, then the drain's: draining, (killing), stopped."""
        return self.drain.phase or self._phase

    @property
    def settings(self) -> Settings:
        """The running configuration (a reload replaces it in the process table)."""
        return self.processes.settings

    # -- the loop ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Install the signal fd, fork every slot's child, then start the threads."""
        self._install()
        for slot in self.processes.slots:
            self.processes.spawn(slot)
        self._phase = "running"
        if self.metrics is not None:
            self.metrics.start()
        self.probe.start()   # only now: no database connection exists before the forks
        log.info("xjobsd %d: supervising %d child process(es)%s%s", self.pid, len(self.processes.slots),
                 f"; metrics on http://{self.metrics.address}/metrics" if self.metrics else "",
                 f"; control socket {self.control.path}" if self.control else "")

    def run(self) -> int:
        """Supervise until drained; answers the process exit code. No child outlives it."""
        try:
            set_title(process_title(",".join(self.settings.apps), "supervisor"))
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
                self.signals.read()
            elif data == "wake":
                self.wake.clear()
            elif data == "control" and self.control is not None:
                for conn in self.control.accept():
                    self.selector.register(conn, selectors.EVENT_READ, ("client", conn))
            elif isinstance(data, tuple) and data[0] == "client" and self.control is not None:
                if self.control.readable(data[1]):
                    self._drop_client(data[1])
            elif isinstance(data, Child):
                self.processes.on_io(data, mask)
        now = time.monotonic()
        if self.control is not None:
            for conn in self.control.expired(now):
                self._drop_client(conn)
        for name in self.signals.pop():
            getattr(self, f"handle_{name}")()
        self.reloader.poll()
        self._apply_probe_results()
        self.processes.reap(now)
        self.processes.check(now)
        self._maintain(now)
        self._progress_drain(now)
        self.publisher.publish(self, now)

    def _next_wake(self) -> float:
        now = time.monotonic()
        due = [now + 1.0, *self.processes.next_due(now, starting=self.state == "running")]
        if self.drain.deadline is not None and self.drain.deadline > now:
            due.append(self.drain.deadline)
        return max(0.0, min(due) - now)

    def _maintain(self, now: float) -> None:
        if self.state != "running":
            return
        if self.reshaper.advance():
            self.notifier.ready(report.status_line(self))   # ends systemd's "reloading" state
        self.processes.start_due(now)
        if not self._ready_sent and self.processes.all_ready():
            self._ready_sent = True
            log.info("xjobsd %d: every child is ready", self.pid)
            self.notifier.ready(report.status_line(self))

    def _progress_drain(self, now: float) -> None:
        if self.drain.progress(now):
            self.probe.flush_releases(self.options.release_flush_s)
            self._apply_probe_results()
            self.drain.finish(self.probe.pending_releases)

    # -- signals: handlers only record; the loop dispatches here --------------------------------------

    def _install(self) -> None:
        self.selector.register(self.signals.reader, selectors.EVENT_READ, "signal")
        self.selector.register(self.wake.reader, selectors.EVENT_READ, "wake")
        if self.control is not None:
            self.selector.register(self.control.listener, selectors.EVENT_READ, "control")
        self.signals.install()

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

    def handle_chld(self) -> None:
        self.processes.reap(time.monotonic())

    def _stop_signal(self, name: str, now: float) -> None:
        if not self.drain.count_stop_signal(name, now):
            return
        if self.state in ("starting", "running"):
            self.begin_drain(f"{name} to the supervisor")
        elif self.drain.stop_signals >= 2:
            self.drain.kill_all(f"a second {name}")
        else:
            log.info("%s while draining (%s): the drain goes on; another stop signal kills every child",
                     name, self.drain.reason)

    def _scale_signal(self, name: str, delta: int) -> None:
        # a signal has nobody to answer: it clamps (1..MAX_PROCESSES) where a command refuses
        try:
            self.scale(None, delta=delta, clamp=True)
        except InvalidOption as exc:   # no scalable queue at all: nothing to scale
            log.warning("%s ignored: %s", name, exc)

    # -- what signals and commands route into -------------------------------------------------------

    def begin_drain(self, reason: str) -> None:
        """Accept phase in every child at once, under one deadline (``draining.py``)."""
        if self.state not in ("starting", "running"):
            return
        self.reloader.abandon("the daemon is draining")
        self.reshaper.abandon()   # a drain ends a reload where it stands
        self.drain.begin(reason, time.monotonic())

    def reload(self) -> Deferred:
        """Validate, then replace what changed (``reload.py``): answered once the app has been
        validated in a fresh process (``Deferred.answer``; at once when refused, or when there
        is no app to validate)."""
        later = Deferred()
        if self.state != "running":
            later.reply({"ok": False, "error": f"cannot reload while {self.state}"})
        else:
            self.reloader.request(later.reply)
        return later

    def _reload_planned(self, answer: dict[str, Any]) -> None:
        if answer["groups"]:
            self.notifier.reloading(f"reloading: replacing {', '.join(answer['groups'])} one group at a time")

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              allow_zero: bool = False, clamp: bool = False,
              concurrency: int | None = None) -> dict[str, Any]:
        if self.state != "running":
            return {"ok": False, "error": f"cannot scale while {self.state}"}
        return self.reshaper.scale(queue, delta=delta, processes=processes, allow_zero=allow_zero,
                                   clamp=clamp, concurrency=concurrency)

    # -- control commands: one small handler each --------------------------------------------------

    def cmd_status(self, message: dict[str, Any]) -> dict[str, Any]:
        """``{"type": "status"}`` (``xjobsd status``): children, queues, reload state."""
        return {"ok": True, **report.status(self, time.monotonic())}

    def cmd_drain(self, message: dict[str, Any]) -> dict[str, Any]:
        """``{"type": "drain"}`` (``xjobsd drain``): a drain, as a first stop signal would."""
        if self.state not in ("starting", "running"):
            return {"ok": False, "error": f"already {self.state}"}
        self.begin_drain("drain requested over the control socket")
        return {"ok": True, "state": self.state, "deadline_seconds": self.settings.drain_deadline_ms / 1000.0}

    def cmd_reload(self, message: dict[str, Any]) -> Deferred:
        """``{"type": "reload"}`` (``xjobsd reload``): as SIGHUP; the client waits on its
        connection for the answer."""
        return self.reload()

    def cmd_scale(self, message: dict[str, Any]) -> dict[str, Any]:
        """``{"type": "scale", "queue", "processes"|"delta", "allow_zero", "concurrency"}``
        (``xjobsd scale QUEUE =N|+N|-N``): as SIGTTIN/SIGTTOU, but refused out of range."""
        return self.scale(**scale_request(message))

    # -- the probe, publishing, teardown -------------------------------------------------------------

    def _apply_probe_results(self) -> None:
        for result in self.probe.results():
            if isinstance(result, Summary):
                self.summary = result
                self.database_up = True
            elif isinstance(result, Unreachable):
                self.database_up = False
            elif isinstance(result, HandedBack):
                self.database_up = True
                if result.released:
                    count_handback(self.tally, result.identity, result.queue, result.released)
                    self.drain.count_released(len(result.released))
            elif isinstance(result, Abandoned):
                log.warning("sessions of %s outlived the lease window; its jobs are left to the lease",
                            result.identity)
        if self.probe.reachable is not None:
            self.database_up = self.probe.reachable

    def _drop_client(self, conn: socket.socket) -> None:
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        if self.control is not None:
            self.control.drop(conn)

    def _close_in_child(self) -> None:
        """Runs in a fresh child (after the process table closed the children's pipes): drop
        every other fd of the supervisor it inherited."""
        self.wake.close()
        self.signals.close()
        if self.control is not None:
            self.control.listener.close()
            for client in list(self.control.clients.values()):
                client.sock.close()
        if self.metrics is not None:
            self.metrics.close_in_child()
        self.notifier.close()
        self.selector.close()

    def close(self) -> None:
        """Kill whatever is still alive, stop the threads, let go of every fd and signal."""
        self.reloader.abandon("the supervisor is exiting")
        self.processes.close("the supervisor is exiting")
        self.probe.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.control is not None:
            for client in list(self.control.clients.values()):
                self._drop_client(client.sock)
            self.control.close()
        self.signals.restore()
        self.selector.close()
        self.wake.close()
        self.signals.close()
        self.notifier.close()

