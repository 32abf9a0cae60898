"""The process table: every slot, the child filling it, and the children on their way out.

Owned by the arbiter (``arbiter.py`` is the loop, the signals and the commands; ``reshape.py``
changes which slots exist; ``draining.py`` ends them all). Every method runs on the loop
thread. What the table does around a child is read from its role's ``RolePolicy``, never from
its name.

* spawn: fork one child for a slot (``spawn.py`` owns how: ``fork_lock``, blocked signals,
  the pipe); a start the probe's round defers is tried again on a later pass, and a failed
  fork (or no fd left for its pipe) backs the slot off like a failed start.
* replace: a successor starts beside the current child; when it reports ``ready`` the old one
  is retired, so a queue keeps its claimers through a reload or a recycle (``recyclable``).
* retire: ``accept(deadline)`` and a SIGKILL date of deadline + grace; its exit is expected.
  A drain retires every child, interrupting its running work when its policy's ``drain`` is
  ``interrupt``, and so does a reload retiring the child it replaced; a recycle or a
  scale-down never interrupts (running work goes on until the close deadline). A worker hands
  back what still runs at the deadline at once, as it exits (``workers/settle.py``).
* reap: an unexpected exit restarts the slot (``restart="always"``: within a second if the
  child had got ready, else with a growing backoff, ``backoff.py``; ``"never"`` gives the slot
  up until the next reload; ``Slot`` keeps the backoff's bookkeeping). When a role ``hands_back_jobs``, any exit of its child asks the
  probe to hand the child's running jobs back once its database sessions are gone. A CRASH
  (it died on its own, or went silent and was killed) charges the attempt of a job that was
  running alone, and makes suspects of jobs that were running together (they run alone next:
  ``drivers/base.py``); a child the supervisor retired, or killed at a drain deadline, gives
  every job its attempt back.
* watch: a child silent past its window, or never ready, is killed (and so restarted). The
  window is at least one lease: a child silent for less still holds valid leases.
* messages: every field a message carries is checked (``messages.py``); a bad one closes that
  child's channel as a broken frame would, and nothing else.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from ..config import Settings
from ..logs import event
from . import report
from .framing import Channel, FrameError
from .messages import child_message_problem
from .probe import Probe
from .slots import Child, RoleSpec, Slot, SpecKey, describe_exit
from .spawn import Forker
from .tally import Restarts, Tally

if TYPE_CHECKING:
    from .arbiter import ArbiterOptions

log = logging.getLogger("xjobs.supervisor")
_RSS_EVERY_S = 5.0
_DEFERRED_SPAWN_S = 0.02      # a start the probe's round deferred is tried again this soon


class ProcessTable:
    def __init__(self, settings: Settings, options: "ArbiterOptions", specs: list[RoleSpec], *,
                 selector: selectors.BaseSelector, fork_lock: threading.Lock, probe: Probe,
                 tally: Tally, after_fork: Callable[[], None]) -> None:
        self.settings = settings            # what children start with; a reload replaces it
        self.options = options
        self.selector = selector            # the arbiter's: each child's pipe is registered in it
        self.probe = probe
        self.tally = tally
        self.forker = Forker(fork_lock, self._close_in_child)
        self._after_fork = after_fork       # closes the arbiter's own fds in a fresh child
        self.specs: dict[SpecKey, RoleSpec] = {}
        self.slots: list[Slot] = []
        self.retired: list[Child] = []      # asked to go, not yet reaped
        self.retiring_all: tuple[str, float] | None = None   # (reason, deadline) once a drain began
        for spec in specs:
            self.specs[spec.key] = spec
            self.add_slots(spec, spec.processes)

    # -- the table ---------------------------------------------------------------------------------

    def children(self) -> list[Child]:
        out = [c for slot in self.slots for c in slot.children()]
        out.extend(c for c in self.retired if c not in out)
        return out

    def live(self) -> list[Child]:
        return [c for c in self.children() if c.exit_code is None]

    def slots_of(self, key: SpecKey) -> list[Slot]:
        return sorted((s for s in self.slots if s.spec.key == key), key=lambda s: s.index)

    def all_ready(self) -> bool:
        return all(s.child is not None and s.child.state == "ready" for s in self.slots)

    def add_slots(self, spec: RoleSpec, count: int) -> list[Slot]:
        taken = {s.index for s in self.slots if s.spec.key == spec.key}
        added: list[Slot] = []
        index = 1
        while len(added) < count:
            if index not in taken:
                slot = Slot(spec, index)
                self.slots.append(slot)
                added.append(slot)
            index += 1
        return added

    def remove_slot(self, slot: Slot, reason: str) -> None:
        if slot in self.slots:
            self.slots.remove(slot)
        for child in slot.children():
            self.retire(child, reason, interrupt=False)

    def next_due(self, now: float, starting: bool) -> list[float]:
        """When the loop must wake for the table: kills due, and (``starting``) slots waiting
        out a backoff or a start the probe deferred (due ones were started this pass)."""
        due = [c.kill_at for c in self.children() if c.kill_at is not None and c.killed is None]
        if starting:
            if self.forker.deferred:
                due.append(now + _DEFERRED_SPAWN_S)
            due.extend(s.next_start for s in self.slots if s.next_start > now and s.successor is None
                       and (s.child is None or s.want_replace))
        return due

    # -- starting, replacing and retiring children ----------------------------------------------------

    def start_due(self, now: float) -> None:
        """Start every empty slot whose backoff is over, and every successor a slot wants."""
        self.forker.deferred = False
        for slot in list(self.slots):
            if now < slot.next_start:
                continue
            if slot.child is None and slot.successor is None:
                slot.replaced()   # a fresh start already runs the latest spec
                self.spawn(slot)
            elif slot.want_replace and slot.child is not None and slot.successor is None:
                self.spawn(slot, successor=True)

    def spawn(self, slot: Slot, successor: bool = False) -> Child | None:
        try:
            forked = self.forker.fork(slot.spec, slot.index, heartbeat_ms=self.options.heartbeat_ms,
                                      drain_deadline_ms=self.settings.drain_deadline_ms,
                                      app=",".join(self.settings.apps))
        except OSError as exc:
            log.error("cannot start %s: %s", slot.label, exc)
            slot.next_start = time.monotonic() + self.options.backoff.delay(max(1, slot.failures))
            return None
        if forked is None:
            return None   # the probe holds a connection: fork on a later pass
        now = time.monotonic()
        child = Child(slot=slot, identity=forked.identity, proc=forked.proc, channel=Channel(forked.sock),
                      started_at=now, last_seen=now)
        self.selector.register(forked.sock, selectors.EVENT_READ, child)
        if successor:
            slot.successor = child
        else:
            slot.child = child
        event(log, logging.INFO, "child.started", "%s started as pid %d", child.title, child.pid,
              role=child.role, queue=slot.spec.queue, pid=child.pid, child=child.identity)
        if self.retiring_all is not None:   # a drain began meanwhile
            self.retire(child, *self.retiring_all, interrupt=slot.spec.policy.interrupts)
        return child

    def _close_in_child(self, own_parent_end: socket.socket) -> None:
        """Runs in a fresh child: drop every fd of the supervisor it inherited."""
        own_parent_end.close()
        for child in self.children():
            child.channel.close()
        self._after_fork()

    def retire(self, child: Child, reason: str, deadline: float | None = None, *,
               interrupt: bool) -> None:
        """Ask one child to stop claiming and go; its exit is then expected, not restarted.

        With ``interrupt`` its running work is told to stop; without, it runs on until the
        deadline. A drain reaching a child already retired without interrupting tells it
        again, with the drain's deadline if that comes first."""
        if child.exit_code is not None:
            return
        now = time.monotonic()
        deadline = deadline if deadline is not None else now + self.settings.drain_deadline_ms / 1000.0
        if child.retiring is None or (interrupt and not child.interrupted):
            child.retiring = child.retiring or reason
            child.interrupted = interrupt
            kill_at = deadline + self.options.kill_grace_s
            child.kill_at = kill_at if child.kill_at is None else min(child.kill_at, kill_at)
            child.channel.send({"type": "accept", "deadline_at": deadline * 1000.0, "reason": reason,
                                "interrupt": interrupt})
        slot = child.slot
        if slot.child is child:
            slot.child = None
        if slot.successor is child:
            slot.successor = None
        if child not in self.retired:
            self.retired.append(child)

    def retire_all(self, reason: str, deadline: float) -> None:
        """A drain's accept phase: every child, each as its role's policy says a drain means."""
        self.retiring_all = (reason, deadline)
        for child in self.live():
            self.retire(child, reason, deadline, interrupt=child.policy.interrupts)

    def close_all(self, now: float, reason: str) -> None:
        """A drain's deadline: the close phase for every child still working."""
        for child in self.live():
            if child.state not in ("stopped", "closing") and child.killed is None and not child.close_sent:
                child.close_sent = True
                child.channel.send({"type": "close", "deadline_at": now * 1000.0, "reason": reason})

    def kill_all(self, reason: str) -> int:
        live = self.live()
        for child in live:
            child.kill(reason)
        return len(live)

    def close(self, reason: str, join_s: float = 5.0) -> None:
        """The supervisor is exiting: kill whatever is still alive and wait for it."""
        live = self.live()
        for child in live:
            child.kill(reason)
        for child in live:
            child.proc.join(join_s)

    def _on_ready(self, child: Child) -> None:
        slot = child.slot
        if slot.successor is child:
            old = slot.child
            slot.child, slot.successor = child, None
            reason, interrupt = slot.replaced()
            if old is not None:
                log.info("%s replaced by pid %d (%s)", old.title, child.pid, reason)
                self.retire(old, f"replaced ({reason})", interrupt=interrupt and old.policy.interrupts)

    # -- messages from children ----------------------------------------------------------------------

    def on_io(self, child: Child, mask: int) -> None:
        if mask & selectors.EVENT_WRITE:
            child.channel.flush()
        if mask & selectors.EVENT_READ:
            try:
                messages = child.channel.receive()
            except (EOFError, FrameError, OSError):
                self._close_channel(child)
                return
            for message in messages:
                problem = child_message_problem(message)
                if problem is not None:
                    log.error("%s sent a bad message (%s); closing its channel", child.title, problem)
                    self._close_channel(child)
                    return
                self._on_message(child, message)
        if not child.channel.closed:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if child.channel.wants_write else 0)
            self.selector.modify(child.channel.sock, events, child)

    def _on_message(self, child: Child, message: dict[str, Any]) -> None:
        child.last_seen = time.monotonic()
        kind = message["type"]
        wire = message.get("stats")
        if isinstance(wire, dict) and wire:
            child.stats = child.policy.stats.from_wire(wire)
            self.tally.observe(child.identity, child.role, child.queue, child.slot.index, child.stats,
                               gauges=child.policy.gauge_stats())
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

    def reap(self, now: float) -> None:
        for child in self.children():
            if child.exit_code is None and child.proc.exitcode is not None:
                self._on_exit(child, child.proc.exitcode, now)

    def _on_exit(self, child: Child, code: int, now: float) -> None:
        child.exit_code = code
        if not child.channel.closed:   # its last words (the final stats) may still be queued
            try:
                for message in child.channel.receive():
                    if child_message_problem(message) is not None:
                        break
                    self._on_message(child, message)
            except (EOFError, FrameError, OSError):
                pass
            self._close_channel(child)
        self.tally.forget(child.identity)
        how = describe_exit(code, child.killed)
        policy = child.policy
        if policy.hands_back_jobs:
            crashed, charge = child.verdict(code)
            self.probe.request_release(child.identity, child.queue, self.settings.lease_ms / 1000.0,
                                       crashed=crashed, how=("killed " if code < 0 else "exited ") + how,
                                       charge=charge)
        slot = child.slot
        if child in self.retired:
            self.retired.remove(child)
        if slot.child is child:
            slot.child, slot.successor = slot.successor, None
            if slot.child is not None:
                slot.replaced()
        elif slot.successor is child:
            slot.successor = None
        if child.retiring is not None or self.retiring_all is not None:
            event(log, logging.INFO, "child.exited", "%s exited %s (%s)", child.title, how,
                  child.retiring or "draining", role=child.role, pid=child.pid, how=how)
            return
        uptime = now - child.started_at
        if policy.restart == "never":
            if slot.child is None and slot in self.slots:
                self.slots.remove(slot)
                log.error("%s exited unexpectedly %s after %.1fs; not restarted (its role's restart "
                          "policy is 'never') until the next reload", child.title, how, uptime)
            return
        delay = slot.restart_after(child, how, now, self.options.backoff)
        self.tally.add(Restarts(child.role))
        event(log, logging.WARNING, "child.restarted", "%s exited unexpectedly %s after %.1fs; "
              "restarting in %.2fs", child.title, slot.last_exit, uptime, delay, role=child.role,
              pid=child.pid, how=slot.last_exit, uptime_s=round(uptime, 3), restart_in_s=round(delay, 3))

    def check(self, now: float) -> None:
        """Liveness of every child: deadlines passed, silence, startup, health."""
        opts = self.options
        for child in self.children():
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
            window = self.silence_window_s()
            if silent > window:
                log.error("%s silent for %.1fs; killing it", child.title, silent)
                child.kill(f"silent for {silent:.1f}s", at_fault=True)
                continue
            if silent > window / 2 and now - child.pinged_at > 1.0:
                child.pinged_at = now
                child.channel.send({"type": "ping"})
            self._check_health(child, now)

    def silence_window_s(self) -> float:
        """How long a ready child may say nothing before it is killed: at least a lease (and
        one heartbeat of slack), since a child silent for less still holds valid leases and
        may only be waiting out a slow database."""
        return max(self.options.silence_s,
                   self.settings.lease_ms / 1000.0 + self.options.heartbeat_ms / 1000.0)

    def _check_health(self, child: Child, now: float) -> None:
        slot, opts = child.slot, self.options
        slot.settle(child, now, opts.backoff)
        if not child.policy.recyclable or slot.want_replace or slot.child is not child:
            return
        claimed = child.stats.job_counts().claimed
        if opts.recycle_jobs is not None and claimed >= opts.recycle_jobs:
            slot.ask_replace(f"recycled after {claimed} jobs")
        elif opts.recycle_rss_bytes is not None and now - child.rss_checked >= _RSS_EVERY_S:
            child.rss_checked = now
            rss = report.rss_bytes(child.proc.pid)
            if rss is not None and rss > opts.recycle_rss_bytes:
                slot.ask_replace(f"recycled at {rss // (1024 * 1024)} MiB resident")
