"""The drain: two phases under one deadline, and what the stop signals count for.

Owned by the arbiter, which starts it (a stop signal, ``xjobsd drain``) and moves it forward
once a loop pass. Its phases are the arbiter's states from then on::

    (none) ──begin──> draining ──no child left──> stopped
                         └── a second stop signal ──> killing ──no child left──> stopped

* ``begin`` sends ``accept`` to every child at once (``ProcessTable.retire_all``): stop
  taking work and, for a role whose policy's ``drain`` is ``interrupt`` (the workers), tell
  running work to stop (``ctx.signal``);
* in-flight work has until the deadline; at the deadline ``close`` goes to every child still
  working, and anything alive at deadline + grace is SIGKILLed (``processes.py``);
* once no child is left ``progress`` answers True: the arbiter gives pending hand-backs
  ``release_flush_s`` and ``finish`` says how it went.

Only a second stop SIGNAL skips to the kill: ``xjobsd drain`` followed by the first SIGTERM
(``systemctl stop`` after a drain asked over the control socket) goes on draining. A repeat of
the same signal within ``REPEAT_WINDOW_S`` is the same stop delivered twice and counts once.

The drain ends with one line in one vocabulary: a run is *interrupted* when it stopped because
of the drain's signal (back to ready at once, attempt not charged), *abandoned* when it was
still running at the deadline (its worker hands it back as it exits, attempt not charged) or
when its child died with it (the supervisor hands it back once the child's sessions are gone).
"""

from __future__ import annotations

import logging

from . import report
from .notify import Notifier
from .processes import ProcessTable
from .tally import Tally

log = logging.getLogger("xjobs.supervisor")

# coreutils ``timeout`` sends its signal to the supervisor and then to the supervisor's process
# group, so one stop arrives twice, microseconds apart (the kernel merges the two only when the
# first is still pending). A second stop meant as "kill now" comes from someone who saw the
# drain begin and judged it too slow: that takes seconds. One second sits far from both.
REPEAT_WINDOW_S = 1.0
_EXTEND_EVERY_S = 5.0


class Drain:
    def __init__(self, processes: ProcessTable, tally: Tally, notifier: Notifier) -> None:
        self.processes = processes
        self.tally = tally
        self.notifier = notifier
        self.phase: str | None = None          # None until it begins; then draining, killing, stopped
        self.reason: str | None = None
        self.deadline: float | None = None     # time.monotonic()
        self.stop_signals = 0
        self._last_stop_signal: tuple[str, float] | None = None   # (name, when), to count repeats once
        self._released = 0                     # runs the supervisor handed back during the drain
        self._interrupted_base = 0.0
        self._abandoned_base = 0.0
        self._next_extend = 0.0

    def count_stop_signal(self, name: str, now: float) -> bool:
        """Count a stop signal; False when it is the last one delivered twice (to the process
        and to its group), which counts once."""
        last = self._last_stop_signal
        if last is not None and last[0] == name and now - last[1] < REPEAT_WINDOW_S:
            log.debug("%s again %.3fs after the last one: the same stop delivered twice (to the "
                      "process and to its group), counted once", name, now - last[1])
            return False
        self._last_stop_signal = (name, now)
        self.stop_signals += 1
        return True

    def begin(self, reason: str, now: float) -> None:
        """Accept phase in every child at once, under one deadline."""
        if self.phase is not None:
            return
        settings = self.processes.settings
        self.phase = "draining"
        self.reason = reason
        self.deadline = now + settings.drain_deadline_ms / 1000.0
        self._interrupted_base = self.tally.sum("interrupted")
        self._abandoned_base = self.tally.sum("abandoned")
        self._released = 0
        children = self.processes.live()
        log.info("draining (%s): %d child(ren), %d job(s) in flight, deadline %.1fs", reason,
                 len(children), report.jobs_in_flight(children), settings.drain_deadline_ms / 1000.0)
        self.notifier.stopping(f"draining: {reason}")
        self.processes.retire_all(reason, self.deadline)

    def kill_all(self, reason: str) -> None:
        self.phase = "killing"
        log.warning("%s: SIGKILL to %d child(ren)", reason, self.processes.kill_all(reason))

    def count_released(self, n: int) -> None:
        """The probe handed back ``n`` runs of a dead child."""
        if self.phase is not None:
            self._released += n

    def progress(self, now: float) -> bool:
        """Move the drain on; True once no child is left (then ``finish``)."""
        if self.phase not in ("draining", "killing"):
            return False
        if self.deadline is not None and now >= self.deadline:
            self.processes.close_all(now, "drain deadline")
        live = self.processes.live()
        if not live:
            return True
        if now >= self._next_extend:
            self._next_extend = now + _EXTEND_EVERY_S
            last = max((c.kill_at or now) for c in live)
            self.notifier.extend_timeout(max(0.0, last - now) + 10.0)
        return False

    def finish(self, pending_releases: int) -> None:
        """The one line that ends a drain; ``pending_releases`` hand-backs did not finish."""
        interrupted = int(self.tally.sum("interrupted") - self._interrupted_base)
        by_worker = int(self.tally.sum("abandoned") - self._abandoned_base)
        by_supervisor = self._released
        log.info("drained: %d run(s) interrupted and back to ready, %d run(s) abandoned (%d handed back "
                 "by their worker at the deadline; %d handed back by the supervisor for children that "
                 "died)%s", interrupted, by_worker + by_supervisor, by_worker, by_supervisor,
                 f"; the runs of {pending_releases} child(ren) are left to their lease"
                 if pending_releases else "")
        self.phase = "stopped"
