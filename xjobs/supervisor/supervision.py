"""Slots and the processes filling them: start, replace, retire, reap, watch.

The half of the arbiter that knows about children (``arbiter.py`` is the loop, the signals
and the commands, ``draining.py`` the drain, ``reshape.py`` reload and scale). Every method
runs on the loop thread.

* start: fork under ``fork_lock`` (never while the probe holds a connection), with the
  supervisor's signals blocked until the child has its own handlers (a signal meant for the
  new child must never run the parent's handler, which would report it to the parent); the
  child first closes every supervisor fd it inherited, then hosts its role (``child.py``).
  A failed fork (or no fd left for its pipe) backs the slot off like a failed start.
* replace: a successor starts beside the current child; when it reports ``ready`` the old one
  is retired, so a queue keeps its claimers through a reload or a recycle.
* retire: ``accept(deadline)`` and a SIGKILL date of deadline + grace; its exit is expected.
  A drain retires with ``interrupt`` (running jobs see ``ctx.signal``); a recycle, reload or
  scale-down does not (running jobs go on until the close deadline).
* reap: an unexpected exit restarts the slot (within a second if the child had got ready,
  else with a growing backoff: ``backoff.py``); any worker's exit asks the probe to hand its running jobs back
  once its database sessions are gone. A CRASH (it died on its own, or went silent and was
  killed) charges the attempt of a job that was running alone, and makes suspects of jobs
  that were running together (they run alone next: ``drivers/base.py``); a child the
  supervisor retired, or killed at a drain deadline, gives every job its attempt back.
* watch: a child silent past its window, or never ready, is killed (and so restarted). The
  window is at least one lease: a child silent for less still holds valid leases.
* messages: every field a message carries is checked (``messages.py``); a bad one closes that
  child's channel as a broken frame would, and nothing else.
"""

from __future__ import annotations

import logging
import selectors
import signal
import socket
import time

from . import report
from .child import FORK_BLOCKED_SIGNALS, ChildSpec, child_main
from .framing import Channel, FrameError, pair
from .messages import child_message_problem
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
        identity = new_identity(slot.spec.role)
        spec = ChildSpec(role=slot.spec.role, queue=slot.spec.queue, index=slot.index,
                         identity=identity, parent_pid=self.pid,
                         heartbeat_ms=self.options.heartbeat_ms,
                         drain_deadline_ms=self.settings.drain_deadline_ms)
        parent_end = child_end = None
        mask = None
        try:
            parent_end, child_end = pair()
            proc = self._context.Process(
                target=child_main, name=spec.title,
                args=(child_end, spec, slot.spec.make, lambda: self._close_in_child(parent_end)))
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORK_BLOCKED_SIGNALS)
            proc.start()   # the child unblocks them once its own handlers are in place
        except OSError as exc:
            log.error("cannot start %s: %s", slot.label, exc)
            if parent_end is not None:
                parent_end.close()
            slot.next_start = time.monotonic() + self.options.backoff.delay(max(1, slot.failures))
            return None
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.fork_lock.release()
            if child_end is not None:
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

    def _retire(self, child: Child, reason: str, deadline: float | None = None, *,
                interrupt: bool = True) -> None:
        """Ask one child to stop claiming and go; its exit is then expected, not restarted.

        With ``interrupt`` its running jobs are told to stop (a drain); without, they run on
        until the deadline. A drain reaching a child already retired without interrupting
        tells it again, with the drain's deadline if that comes first."""
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
                self._retire(old, f"replaced ({reason})", interrupt=False)

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
                problem = child_message_problem(message)
                if problem is not None:
                    log.error("%s sent a bad message (%s); closing its channel", child.title, problem)
                    self._close_channel(child)
                    return
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
                    if child_message_problem(message) is not None:
                        break
                    self._on_message(child, message)
            except (EOFError, FrameError, OSError):
                pass
            self._close_channel(child)
        self.tally.forget(child.identity)
        how = _describe_exit(code, child.killed)
        if child.role == "worker":
            crashed, charge = _verdict(child, code)
            self.probe.request_release(child.identity, child.queue, self.settings.lease_ms / 1000.0,
                                       crashed=crashed, how=("killed " if code < 0 else "exited ") + how,
                                       charge=charge)
        slot = child.slot
        if child in self.retired:
            self.retired.remove(child)
        if slot.child is child:
            slot.child, slot.successor = slot.successor, None
            if slot.child is not None:
                slot.want_replace = None
        elif slot.successor is child:
            slot.successor = None
        if child.retiring is not None or self.state != "running":
            log.info("%s exited %s (%s)", child.title, how, child.retiring or self.state)
            return
        uptime = now - child.started_at
        backoff = self.options.backoff
        slot.restarts += 1
        slot.exits = [t for t in slot.exits if now - t < backoff.crash_window_s][-100:] + [now]
        self.tally.add(("restarts", child.role))
        if child.ready_at is None:
            # it never got ready: it cannot start, and restarting at once would only spin
            slot.failures += 1
            delay = backoff.delay(slot.failures)
        else:
            # it served and was killed, from outside or by a job (which pays per job): the
            # queue gets its worker back within a second, sooner for a single death
            slot.failures = 0
            delay = backoff.after_ready(sum(1 for t in slot.exits if now - t < backoff.burst_window_s))
        slot.next_start = now + delay
        slot.last_exit = how + (f": {child.error}" if child.error else "")
        crash_loop = backoff.in_crash_loop(slot.failures, len(slot.exits))
        if crash_loop and not slot.crash_loop:
            log.error("%s is in a crash loop: %d unexpected exit(s) in %.0fs, the last %s",
                      slot.label, len(slot.exits), backoff.crash_window_s, slot.last_exit)
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
        if slot.failures and child.ready_at is not None and now - child.ready_at >= opts.backoff.stable_s:
            slot.failures = 0
        if slot.crash_loop and not slot.failures and (
                not slot.exits or now - slot.exits[-1] >= opts.backoff.crash_window_s):
            log.info("%s is stable again", slot.label)
            slot.crash_loop, slot.exits = False, []
        if child.role != "worker" or slot.want_replace or slot.child is not child:
            return
        if opts.recycle_jobs is not None and child.stats.get("claimed", 0) >= opts.recycle_jobs:
            slot.want_replace = f"recycled after {child.stats.get('claimed')} jobs"
        elif opts.recycle_rss_bytes is not None and now - child.rss_checked >= _RSS_EVERY_S:
            child.rss_checked = now
            rss = report.rss_bytes(child.pid)
            if rss is not None and rss > opts.recycle_rss_bytes:
                slot.want_replace = f"recycled at {rss // (1024 * 1024)} MiB resident"


def _verdict(child: Child, code: int) -> tuple[bool, str]:
    """Whether a worker's death may be one of its jobs' doing, and which lone job its hand-back
    may charge (``job_release_worker``).

    The supervisor's own decisions (a drain deadline, a second stop signal, a retirement that
    ended cleanly) are nobody's fault. A process that died on its own, even while retiring, may
    have been killed by a job: the one job it ran alone is charged, unless its last report
    counted other bodies still running in it (a timed-out ``def`` body's thread, which the
    database no longer shows). A process killed for going silent is charged only for a job
    already under suspicion: a stalled database can silence a loop too.
    """
    if child.at_fault:
        return True, "suspect"
    if child.killed is not None or (child.retiring is not None and code == 0):
        return False, "never"
    return True, "alone" if child.in_flight <= 1 else "never"


def _describe_exit(code: int, killed: str | None) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"by {name}" + (f" ({killed})" if killed else "")
    return f"with code {code}"
