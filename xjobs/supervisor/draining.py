"""The drain: two phases under one deadline, and the stop signals that start and cut it short.

* ``begin_drain`` (a stop signal, or ``xjobsd drain``) sends ``accept`` with ``interrupt`` to
  every child at once: stop claiming, tell running work to stop (``ctx.signal``);
* in-flight work has until the deadline; at the deadline ``close`` goes to every child still
  working, and anything alive at deadline + grace is SIGKILLed (``supervision``);
* once no child is left, pending hand-backs get ``release_flush_s`` and the loop stops.

Only a second stop SIGNAL skips to the kill: ``xjobsd drain`` followed by the first SIGTERM
(``systemctl stop`` after a drain asked over the control socket) goes on draining. A repeat of
the same signal within ``REPEAT_WINDOW_S`` is the same stop delivered twice and counts once.

The drain ends with one line in one vocabulary: a run is *interrupted* when it stopped because
of the drain's signal (back to ready at once, attempt given back), *abandoned* when it was
still running at the deadline (its worker hands it back one lease later) or when its child
died with it (the supervisor hands it back once the child's sessions are gone).
Mixed into ``Arbiter``; every method runs on the loop thread.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("xjobs.supervisor")

# coreutils ``timeout`` sends its signal to the supervisor and then to the supervisor's process
# group, so one stop arrives twice, microseconds apart (the kernel merges the two only when the
# first is still pending). A second stop meant as "kill now" comes from someone who saw the
# drain begin and judged it too slow: that takes seconds. One second sits far from both.
REPEAT_WINDOW_S = 1.0


def _counter(tally, name: str) -> float:
    """A counter the children report (``stats``), summed over every role and queue."""
    return sum(v for k, v in tally.items("counter") if k[3] == name)


class Draining:
    def _stop_signal(self, name: str, now: float) -> None:
        last = self._last_stop_signal
        if last is not None and last[0] == name and now - last[1] < REPEAT_WINDOW_S:
            log.debug("%s again %.3fs after the last one: the same stop delivered twice (to the "
                      "process and to its group), counted once", name, now - last[1])
            return
        self._last_stop_signal = (name, now)
        self._stop_signals += 1
        if self.state in ("starting", "running"):
            self.begin_drain(f"{name} to the supervisor")
        elif self._stop_signals >= 2:
            self.kill_all(f"a second {name}")
        else:
            log.info("%s while draining (%s): the drain goes on; another stop signal kills every child",
                     name, self.drain_reason)

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
        self._reloading = False
        self._interrupted_base = _counter(self.tally, "interrupted")
        self._abandoned_base = _counter(self.tally, "abandoned")
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
                if child.state not in ("stopped", "closing") and child.killed is None and not child.close_sent:
                    child.close_sent = True
                    child.channel.send({"type": "close", "deadline_at": now * 1000.0, "reason": "drain deadline"})
        if live:
            if now >= self._next_extend:
                self._next_extend = now + 5.0
                last = max((c.kill_at or now) for c in live)
                self.notifier.extend_timeout(max(0.0, last - now) + 10.0)
            return
        self.probe.flush_releases(self.options.release_flush_s)
        self._apply_probe_results()
        interrupted = int(_counter(self.tally, "interrupted") - self._interrupted_base)
        by_worker = int(_counter(self.tally, "abandoned") - self._abandoned_base)
        by_supervisor = self._released_in_drain
        log.info("drained: %d run(s) interrupted and back to ready, %d run(s) abandoned (%d handed back "
                 "by their worker, ready again after one lease; %d handed back by the supervisor for "
                 "children that died)%s", interrupted, by_worker + by_supervisor, by_worker, by_supervisor,
                 f"; the runs of {self.probe.pending_releases} child(ren) are left to their lease"
                 if self.probe.pending_releases else "")
        self.state = "stopped"
