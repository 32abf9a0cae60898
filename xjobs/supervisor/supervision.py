"""Slots and the processes filling them: start, replace, retire, reap, watch, reshape.

The half of the arbiter that knows about children (``arbiter.py`` is the loop, the signals,
the commands and the drain). Every method runs on the loop thread.

* start: fork under ``fork_lock`` (never while the probe holds a connection); the child first
  closes every supervisor fd it inherited, then hosts its role (``child.py``).
* replace: a successor starts beside the current child; when it reports ``ready`` the old one
  is retired, so a queue keeps its claimers through a reload or a recycle.
* retire: ``accept(deadline)`` and a SIGKILL date of deadline + grace; its exit is expected.
* reap: an unexpected exit restarts the slot with backoff; any worker's exit asks the probe to
  hand its running jobs back once its database sessions are gone.
* watch: a child silent past its window, or never ready, is killed (and so restarted).
* reshape: SIGHUP re-reads the configuration and replaces children one role group at a time;
  SIGTTIN/SIGTTOU and ``scale`` add or remove worker slots.
"""

from __future__ import annotations

import logging
import selectors
import signal
import socket
import time
from collections import deque

from ..errors import InvalidOption
from . import report
from .child import ChildSpec, child_main
from .framing import Channel, FrameError, pair
from .slots import Child, RoleSpec, Slot, new_identity

log = logging.getLogger("xjobs.supervisor")
_RSS_EVERY_S = 5.0


class Supervision:
    """Mixed into ``Arbiter``: the attributes used here are set in its ``__init__``."""

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
                slot.want_replace = None   # a fresh start already runs the latest spec
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
        # a child that never got ready, or died soon after, is failing; one that served a
        # while died of something else and starts again at once
        served = now - child.ready_at if child.ready_at is not None else 0.0
        slot.failures = backoff.failures_after(slot.failures, served)
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

    # -- reload and scale ---------------------------------------------------------------------------

    def reload(self) -> dict:
        if self.state != "running":
            return {"ok": False, "error": f"cannot reload while {self.state}"}
        if self.configure is None:
            return {"ok": False, "error": "this supervisor has no configuration to re-read"}
        try:
            settings, specs = self.configure()
        except Exception as exc:   # a bad file must never take the running daemon down
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
                self.specs.pop(key, None)
                for slot in slots:
                    self._remove_slot(slot, "removed from the configuration")
                continue
            self.specs[key] = spec
            for slot in slots[:spec.processes]:
                slot.spec = spec
                if slot.child is not None:   # an empty slot just starts on the new spec
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
        specs = {key: spec for key, spec in self.specs.items() if spec.role == "worker"}
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


def _describe_exit(code: int, killed: str | None) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"by {name}" + (f" ({killed})" if killed else "")
    return f"with code {code}"
