"""The queue worker's settler: what finished bodies, timeouts and abandoned runs write.

Everything here runs on the worker's loop thread, after the body's ``try`` is over: a write
that fails is tried again (``settle_retry.py``) until its lease lapses, never turned into a
retry decision of the job. Per pass:

* ``settle`` drains ``Results`` (bodies that returned or raised since the last pass), asks
  ``settlement_for`` what each comes to, and writes them: the completions of one pass as ONE
  ``job_ack_many`` statement, then its failures and interruptions as ONE ``job_nack_many``
  (each fenced on its own claim token);
* ``expire`` times out runs past their deadline: cancel the body first, then fail the
  attempt (a timeout is the job's own failure even while draining: it follows the retry
  policy), the pass's timeouts in one ``job_nack_many``;
* ``report_progress`` writes the latest ``ctx.progress()`` reports, at most once a second,
  in one statement fenced on the leases.

At the close deadline ``abandon`` hands back what still runs (in one statement): at once
from a process about to exit, else one lease window from now; a collaborator that lets go of
a run it never started (``quarantine.py``) ``give_back``s it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..config import Settings
from ..context import LEASE_LOST, STEP_TIMED_OUT, TIMED_OUT
from ..drivers.base import ClaimedJob, JobDriver, Nack
from ..errors import JobTimeout, StepTimeout, XJobsError
from ..logs import event, run_fields
from ..reporting import ErrorHook, Reporter
from ..retry import RetryVerdict
from .execute import Executor, Results, Run
from .leases import count_loss, was_cancelled
from .runs import RunTable
from .settle_retry import SettleRetries
from .stats import WorkerStats
from .verdict import Settlement, given_back, settlement_for

log = logging.getLogger("xjobs.worker")
_PROGRESS_EVERY_MS = 1_000.0   # progress reports are written at most this often, in one batch
# a timed-out def body still running this long after its signal was set does not heed it
_OVERRUN_GRACE_MS = 1_000.0


_Report = tuple[BaseException, RetryVerdict]    # a settled failure, for xjobs.on_error


@dataclass(frozen=True, slots=True)
class _Failed:
    """One nack of a pass, with what its landing reports: the failure (for ``xjobs.on_error``),
    and whether a lost lease was counted already (the nack then only spares the job its lapse)."""

    run: Run
    nack: Nack
    report: _Report | None = None
    loss_counted: bool = False


def _reported(error: BaseException | None, outcome: Settlement) -> _Report | None:
    """What a failure's nack reports once it lands: its error and the retry decision."""
    return None if error is None or outcome.verdict is None else (outcome.error or error, outcome.verdict)


class Settler:
    def __init__(self, *, driver: JobDriver, runs: RunTable, results: Results, executor: Executor,
                 stats: WorkerStats, settings: Settings, identity: str,
                 reporter: Reporter | None = None,
                 failures: ErrorHook | None = None) -> None:
        self._driver = driver
        self._runs = runs
        self._results = results
        self._executor = executor
        self._stats = stats
        self._settings = settings
        self._identity = identity
        self._reporter = reporter
        self._failures = failures     # called on this thread for each settled failure
        self._next_progress = 0.0
        # timed-out def bodies whose thread has not returned: id(run) -> (run, when to say so)
        self._overruns: dict[int, tuple[Run, float]] = {}
        self.retries = SettleRetries(runs=runs, stats=stats, lease_ms=settings.lease_ms, identity=identity)

    def next_due(self) -> float | None:
        """When a pass must run for this settler: a progress report waits, or a run's deadline."""
        due = [at for run in self._runs.held.values() if (at := run.due_ms()) is not None]
        if any(run.ctx.pending_progress() is not None for run in self._runs.held.values()):
            due.append(self._next_progress)
        due.extend(at for _, at in self._overruns.values())
        if (retry_at := self.retries.next_due()) is not None:
            due.append(retry_at)
        return min(due) if due else None

    def settle(self, now_ms: float) -> None:
        self.retries.retry(now_ms)
        acks: list[Run] = []
        nacks: list[_Failed] = []
        for run, error in self._results.drain():
            self._runs.vacate(run)
            self._overruns.pop(id(run), None)
            if run.settled:
                continue  # a timeout or a lost lease already decided this run
            try:
                outcome = settlement_for(run, error)
            except Exception as exc:  # never let one odd error object stall the pass
                log.exception("worker %s: deciding %s#%s failed: %s", self._identity, run.job.name,
                              run.job.id, exc)
                outcome = Settlement(None)  # write nothing: the lease lapses, the job runs again
            self._runs.finish(run)
            if outcome.ack:
                acks.append(run)
            elif outcome.nack is not None:
                nacks.append(_Failed(run, outcome.nack, _reported(error, outcome),
                                     loss_counted=run.code_at_return == LEASE_LOST))
            elif outcome.outcome is not None:
                self._stats.outcome(run.job.name, outcome.outcome, run.seconds(now_ms))
            elif run.ctx.fence.refused:
                self._refused(run, now_ms)
            elif run.code_at_return == LEASE_LOST:
                # the lease watch stopped it before the loop could look, or its slot's window
                # closed (leases.py): the database may still honour the lease (a renewal slower
                # than the window; a slot renewal that failed beside a lease's). Give the job back now,
                # fenced on the token, rather than leave it a lease window; if the lease really
                # is gone the nack matches nothing and counts the loss
                # counted as a lost lease whether or not the hand-back lands: the window closed,
                # which is what xjobs_lease_lost_total exists to show (a database or network
                # stall); the hand-back only spares the job the wait for its lapse
                self._stats.bump("lease_lost")
                event(log, logging.ERROR, "job.lease.lost", "worker %s: lost the lease on %s#%s: %s",
                      self._identity, run.job.name, run.job.id, run.signal.reason,
                      why=run.signal.reason, **run_fields(run.job))
                nacks.append(_Failed(run, given_back(
                    run, f"{run.signal.reason}; attempt not counted"), loss_counted=True))
        # a report made just before the run ended lands before its settlement (still fenced on
        # the lease), so a finished job shows how far it got
        self._write_progress(acks + [failed.run for failed in nacks])
        if acks:
            self._write_acks(acks, now_ms)
        if nacks:
            self._write_nacks(nacks, now_ms)

    def expire(self, now_ms: float) -> None:
        """Runs past their deadline, or past their running step's: cancel the body first, then
        fail the attempt (a timeout is the job's own failure even while draining: it follows
        the retry policy)."""
        timeouts: list[_Failed] = []
        for run in list(self._runs.held.values()):
            if run.ctx.completed_in_transaction or run.ctx.fence.suspended:
                continue
            # the body's thread arms and clears its step's ceiling: read it ONCE, and decide
            # both whether the run is due and why from that one reading
            step_due, run_due = run.step_deadline_ms, run.deadline_ms
            error: XJobsError
            if step_due is not None and now_ms >= step_due:
                ceiling = run.handle.step_timeout_ms or 0.0
                code, error = STEP_TIMED_OUT, StepTimeout(f"a step ran past step_timeout={ceiling:g}ms")
            elif run_due is not None and now_ms >= run_due:
                ceiling = run.handle.timeout_ms or 0.0
                code, error = TIMED_OUT, JobTimeout(f"timed out after {ceiling:g}ms")
            else:
                continue
            run.signal.abort(code, str(error))
            self._executor.cancel(run)  # cancel first, then fail the attempt
            self._stats.bump("timed_out")
            self._runs.finish(run)
            if not run.handle.is_async:   # a thread cannot be stopped: see whether it heeds its signal
                self._overruns[id(run)] = (run, now_ms + _OVERRUN_GRACE_MS)
            outcome = settlement_for(run, error, timed_out=True)
            if outcome.nack is not None:
                timeouts.append(_Failed(run, outcome.nack, _reported(error, outcome)))
        if timeouts:
            self._write_nacks(timeouts, now_ms)

    def report_overruns(self, now_ms: float) -> None:
        """Say once of each timed-out ``def`` body that its thread still runs a grace period
        after its signal was set: it does not heed ``ctx.signal``, its slot stays busy until
        it returns, and nothing it writes lands."""
        for key, (run, at) in list(self._overruns.items()):
            if now_ms < at:
                continue
            del self._overruns[key]
            event(log, logging.WARNING, "job.timeout.abandoned", "job %s#%s: its body still runs %.1fs after "
                  "its timeout and does not heed ctx.signal; its slot stays busy until it returns, and "
                  "nothing it writes lands", run.job.name, run.job.id, _OVERRUN_GRACE_MS / 1000.0,
                  timeout_ms=run.handle.timeout_ms, **run_fields(run.job))

    def report_progress(self, now_ms: float) -> None:
        """Once a second: write the latest report of every run still going."""
        if now_ms < self._next_progress:
            return
        self._next_progress = now_ms + _PROGRESS_EVERY_MS
        self._write_progress(self._runs.live())

    def shed(self, job: ClaimedJob, delay_ms: float, why: str, now_ms: float) -> None:
        """The one shed path (a limit, a fleet-wide slot): back to ready, no attempt burned, no
        ``last_error`` (a shed is not a failure), due again after ``delay_ms``."""
        nack = Nack(job.id, job.token, "shed", delay_ms=delay_ms)
        try:
            held = self._driver.job_nack(nack)
        except Exception as exc:   # the lease lapses and the job is delivered again
            log.error("worker %s: shedding %s#%s failed: %s", self._identity, job.name, job.id, exc)
            self._stats.bump("settle_failed")
            return
        if held:
            self._stats.outcome(job.name, "shed", None)
            event(log, logging.DEBUG, "job.shed", "worker %s: shed %s#%s (%s); due again in %.0fms",
                  self._identity, job.name, job.id, why, delay_ms, why=why, delay_ms=delay_ms,
                  **run_fields(job))

    def give_back(self, run: Run, why: str, now_ms: float) -> None:
        """Settle a run this worker lets go of without it failing: back to ready now, fenced
        on its lease, the attempt not counted."""
        self._runs.finish(run)
        self._write_nacks([_Failed(run, given_back(run, why))], now_ms)

    def abandon(self, now_ms: float, *, at_once: bool = False) -> None:
        """At the close deadline: hand back what still runs, without burning the attempt (the
        job did not fail, its worker went away): ``at_once`` when this process ends right
        after (a daemon child: a body still running dies with it, and the fence on the claim
        token keeps anything it writes meanwhile out), else one lease window from now (an
        in-process host: the body may go on running in this process). Counted as
        ``abandoned``, not as the ``interrupted`` outcome: interrupted runs stopped at the
        drain's signal and are back to ready now (the supervisor's drain line tells them apart).
        """
        abandoned = self._runs.live()
        if not abandoned:
            return
        when = "at once" if at_once else "after one lease window"
        event(log, logging.WARNING, "worker.drain.abandoned", "worker %s: drain abandoned %d job(s) still "
              "running at the deadline; they are delivered again %s: %s", self._identity, len(abandoned), when,
              ", ".join(f"{r.job.name}#{r.job.id}" for r in abandoned[:20]),
              count=len(abandoned), job_ids=[r.job.id for r in abandoned[:100]], worker=self._identity)
        error = (f"abandoned at the drain deadline of worker {self._identity}; "
                 f"delivered again {when}, attempt not counted")
        delay = 0.0 if at_once else self._settings.lease_ms
        handed: list[_Failed] = []
        for run in abandoned:
            self._runs.finish(run)
            if not run.ctx.completed_in_transaction:
                handed.append(_Failed(run, Nack(run.job.id, run.job.token, "interrupted", error, delay)))
        if handed:
            self._write_nacks(handed, now_ms, abandoned=True)

    def _report(self, run: Run, error: BaseException, verdict: RetryVerdict) -> None:
        """A failure that settled (its nack landed): to the synchronous sink (a tick's summary)
        and to the app's hooks (on their thread)."""
        if self._failures is not None:
            self._failures(run.ctx, error, verdict)
        if self._reporter is not None:
            self._reporter.report(run.ctx, error, verdict)

    def _refused(self, run: Run, now_ms: float) -> None:
        """The database refused one of the run's writes: the job is not its own any more."""
        count_loss(self._stats, self._identity, run, now_ms, "the database refused one of its writes; "
                   "nothing it wrote after that landed", was_cancelled(self._driver, run))

    def _write_acks(self, acks: list[Run], now_ms: float) -> None:
        def attempt() -> None:
            results = {run.job.id: value for run in acks if (value := run.result or run.ctx.result_set)}
            self._acked(acks, self._driver.job_ack_many([run.lease for run in acks], results), now_ms)
        self.retries.write(acks, attempt, f"settling {len(acks)} completed job(s)", now_ms)

    def _acked(self, acks: list[Run], acked: set[int], now_ms: float) -> None:
        self._stats.outcomes([(run.job.name, "completed", run.seconds(now_ms))
                              for run in acks if run.job.id in acked])
        if log.isEnabledFor(logging.DEBUG):
            for run in acks:
                if run.job.id in acked:
                    event(log, logging.DEBUG, "job.attempt.completed", "job %s#%s completed", run.job.name,
                          run.job.id, seconds=round(run.seconds(now_ms), 6), **run_fields(run.job))
        lost = sum(1 for run in acks if run.job.id not in acked)
        if lost:
            self._stats.bump("lease_lost", lost)

    def _write_nacks(self, nacks: list[_Failed], now_ms: float, *, abandoned: bool = False) -> None:
        """One ``job_nack_many`` for ``nacks``, each fenced on its own claim; what landed is
        counted per run, as it would be one by one."""
        runs = [failed.run for failed in nacks]

        def attempt() -> None:
            settled = self._driver.job_nack_many([failed.nack for failed in nacks])
            for failed in nacks:
                self._nacked(failed, failed.run.job.id in settled, now_ms, abandoned=abandoned)
        if len(nacks) == 1:
            what = f"settling {runs[0].job.name}#{runs[0].job.id} as {nacks[0].nack.outcome}"
        else:
            what = f"settling {len(nacks)} failed or interrupted job(s)"
        if not abandoned:
            self.retries.write(runs, attempt, what, now_ms)
            return
        try:                # the process ends right after: one try, then its lease
            attempt()
        except Exception as exc:
            event(log, logging.ERROR, "job.settle.failed", "worker %s: %s failed: %s", self._identity, what,
                  exc, count=len(runs), tries=1, error=str(exc), job_ids=[r.job.id for r in runs[:100]],
                  worker=self._identity)
            self._stats.bump("settle_failed", len(runs))

    def _nacked(self, failed: _Failed, held: bool, now_ms: float, *, abandoned: bool) -> None:
        run, nack = failed.run, failed.nack
        if held and abandoned:
            self._stats.bump("abandoned")
        elif held:
            self._stats.outcome(run.job.name, nack.outcome, run.seconds(now_ms))
            _settled_event(run, nack, run.seconds(now_ms))
            if failed.report is not None:
                self._report(run, *failed.report)
        elif not failed.loss_counted:
            self._stats.bump("lease_lost")

    def _write_progress(self, runs: list[Run]) -> None:
        """Write the latest ``ctx.progress()`` reports of ``runs`` in one statement, fenced on
        their leases; a report that fails to land is kept for the next round."""
        reports = [(run, report) for run in runs if (report := run.ctx.pending_progress()) is not None]
        if not reports:
            return
        try:
            self._driver.job_progress_many([report for _, report in reports])
        except Exception as exc:
            log.warning("worker %s: writing progress failed: %s", self._identity, exc)
            return
        for run, report in reports:
            run.ctx.progress_written(report)


def _settled_event(run: Run, nack: Nack, seconds: float) -> None:
    """The stable log events of a settled failure or interruption (``xjobs.logs``)."""
    fields = {**run_fields(run.job), "seconds": round(seconds, 6)}
    if nack.outcome in ("retried", "dead"):
        verdict = "dead" if nack.outcome == "dead" else f"retry in {nack.delay_ms / 1000.0:.3f}s"
        event(log, logging.INFO, "job.attempt.failed", "job %s#%s attempt %s failed: %s", run.job.name,
              run.job.id, run.job.attempt, nack.error, error=nack.error, verdict=verdict, **fields)
    if nack.outcome == "retried":
        event(log, logging.INFO, "job.retried", "job %s#%s retried in %.3fs", run.job.name, run.job.id,
              nack.delay_ms / 1000.0, delay_s=nack.delay_ms / 1000.0, **fields)
    elif nack.outcome == "dead":
        event(log, logging.WARNING, "job.dead", "job %s#%s dead: %s", run.job.name, run.job.id, nack.error,
              error=nack.error, **fields)
    elif nack.outcome == "interrupted":
        event(log, logging.INFO, "job.interrupted", "job %s#%s interrupted, attempt not counted: %s",
              run.job.name, run.job.id, nack.error, error=nack.error, **fields)
    elif nack.outcome == "snoozed":
        event(log, logging.INFO, "job.snoozed", "job %s#%s snoozed for %.3fs, attempt not counted", run.job.name,
              run.job.id, nack.delay_ms / 1000.0, delay_s=nack.delay_ms / 1000.0, snoozes=run.job.snoozes + 1,
              **fields)


__all__ = ["Settler"]
