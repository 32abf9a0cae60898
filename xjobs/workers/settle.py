"""Settlement for the queue worker: what finished bodies, timeouts and abandoned runs write.

Everything here runs on the worker's loop thread, after the body's ``try`` is over: a failing
write is a settle failure (counted, logged, and the lease lapses so the job runs again),
never a retry decision. Completions of one pass go out as ONE ``ack`` statement.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..context import LEASE_LOST, TIMED_OUT
from ..drivers.base import Nack
from ..errors import JobTimeout
from .execute import Settlement, settlement_for

if TYPE_CHECKING:
    from .execute import Run

log = logging.getLogger("xjobs.worker")


class SettleMixin:
    """Mixed into ``QueueWorker``; uses its ``held``, ``busy``, ``driver`` and ``stats_``."""

    def _settle(self, now_ms: float) -> None:
        acks: list["Run"] = []
        nacks: list[tuple["Run", Settlement]] = []
        done = self._done
        while done:
            run, error = done.popleft()
            self.busy[run.job.queue] -= 1
            self.quarantine.body_ended(run)
            if run.settled:
                continue  # a timeout or a lost lease already decided this run
            try:
                outcome = settlement_for(run, error)
            except Exception as exc:  # never let one odd error object stall the pass
                log.exception("worker %s: deciding %s#%s failed: %s", self.identity, run.job.name, run.job.id, exc)
                outcome = Settlement(None)  # write nothing: the lease lapses, the job runs again
            self._finish(run, now_ms)
            if outcome.ack:
                acks.append(run)
            elif outcome.nack is not None:
                nacks.append((run, outcome))
            elif outcome.outcome is not None:
                self.stats_.outcome(run.job.name, outcome.outcome, run.seconds(now_ms))
            elif run.code_at_return == LEASE_LOST:
                # the lease watch stopped it before the loop could look: the database may still
                # honour the lease (a renewal slower than the window). Give the job back now,
                # fenced on the token, rather than leave it a lease window; if the lease really
                # is gone the nack matches nothing and counts the loss
                log.warning("worker %s: lost the lease on %s#%s: %s", self.identity, run.job.name,
                            run.job.id, run.signal.reason)
                nacks.append((run, self._given_back(
                    run, "no lease renewal landed for a whole window; attempt not counted")))
        # a report made just before the run ended lands before its settlement (still fenced on
        # the lease), so a finished job shows how far it got
        self._write_progress(acks + [run for run, _ in nacks])
        if acks:
            self._write_acks(acks, now_ms)
        for run, outcome in nacks:
            self._write_nack(run, outcome, now_ms)

    def _write_acks(self, acks: list["Run"], now_ms: float) -> None:
        try:
            acked = self.driver.job_ack_many([run.lease for run in acks])
        except Exception as exc:
            log.error("worker %s: settling %d completed job(s) failed; their leases lapse and "
                      "they run again: %s", self.identity, len(acks), exc)
            self.stats_.bump("settle_failed", len(acks))
            return
        self.stats_.outcomes([(run.job.name, "completed", run.seconds(now_ms))
                              for run in acks if run.job.id in acked])
        lost = sum(1 for run in acks if run.job.id not in acked)
        if lost:
            self.stats_.bump("lease_lost", lost)

    def _write_nack(self, run: "Run", outcome: Settlement, now_ms: float, *, abandoned: bool = False) -> None:
        try:
            held = self.driver.job_nack(outcome.nack)
        except Exception as exc:
            log.error("worker %s: settling %s#%s as %s failed: %s", self.identity, run.job.name,
                      run.job.id, outcome.outcome, exc)
            self.stats_.bump("settle_failed")
            return
        if held and abandoned:
            self.stats_.bump("abandoned")
        elif held:
            self.stats_.outcome(run.job.name, outcome.outcome, run.seconds(now_ms))
            if outcome.outcome == "dead":
                log.warning("job %s#%s dead: %s", run.job.name, run.job.id, outcome.nack.error)
        else:
            self.stats_.bump("lease_lost")

    def _given_back(self, run: "Run", why: str) -> Settlement:
        """Back to ready now, the attempt not counted: the job did not fail, this worker let go."""
        return Settlement("interrupted", nack=Nack(run.job.id, run.job.token, why, 0.0,
                                                   counts_as_attempt=False, outcome="interrupted"))

    def _write_progress(self, runs: "list[Run] | None" = None) -> None:
        """Write the latest ``ctx.progress()`` reports of ``runs`` (default: every held run
        still going) in one statement, fenced on their leases; a report that fails to land is
        kept for the next round."""
        candidates = [r for r in self.held.values() if not r.settled] if runs is None else runs
        reports = [(run, report) for run in candidates if (report := run.ctx.pending_progress()) is not None]
        if not reports:
            return
        try:
            self.driver.job_progress_many([report for _, report in reports])
        except Exception as exc:
            log.warning("worker %s: writing progress failed: %s", self.identity, exc)
            return
        for run, report in reports:
            run.ctx.progress_written(report)

    def _finish(self, run: "Run", now_ms: float) -> None:
        run.settled = True
        if self.held.get(run.job.id) is run:  # a newer claim of the same job may hold the key
            del self.held[run.job.id]

    def _expire(self, now_ms: float) -> None:
        for run in [r for r in self.held.values()
                    if r.deadline_ms is not None and now_ms >= r.deadline_ms
                    and not r.ctx.completed_in_transaction]:
            timeout = run.handle.timeout_ms
            run.signal.abort(TIMED_OUT, f"job timed out after {timeout:g}ms")
            self._executor.cancel(run)  # cancel first, then fail the attempt
            self.stats_.bump("timed_out")
            self._finish(run, now_ms)
            if not run.handle.is_async:
                log.warning("job %s#%s timed out; its thread keeps running until the body returns "
                            "(it ignores ctx.signal)", run.job.name, run.job.id)
            # a timeout is the job's own failure even while draining: it follows the retry policy
            outcome = settlement_for(run, JobTimeout(f"timed out after {timeout:g}ms"), timed_out=True)
            if outcome.nack is not None:
                self._write_nack(run, outcome, now_ms)

    def _abandon(self, now_ms: float) -> None:
        """At the close deadline: hand back what still runs, one lease window from now.

        Not at once (the body may still be running in this process until it exits) and
        without burning the attempt: the job did not fail, the process went away. Counted as
        ``abandoned``, not as the ``interrupted`` outcome: interrupted runs stopped at the
        drain's signal and are back to ready now (the supervisor's drain line tells them apart).
        """
        abandoned = [r for r in self.held.values() if not r.settled]
        if not abandoned:
            return
        log.warning("worker %s: drain abandoned %d job(s) still running at the deadline; they are "
                    "delivered again after one lease window: %s", self.identity, len(abandoned),
                    ", ".join(f"{r.job.name}#{r.job.id}" for r in abandoned[:20]))
        for run in abandoned:
            self._finish(run, now_ms)
            if run.ctx.completed_in_transaction:
                continue
            error = (f"abandoned at the drain deadline of worker {self.identity}; "
                     "delivered again after one lease window, attempt not counted")
            self._write_nack(run, Settlement("interrupted", nack=Nack(
                run.job.id, run.job.token, error, self.settings.lease_ms, counts_as_attempt=False,
                outcome="interrupted")), now_ms, abandoned=True)

