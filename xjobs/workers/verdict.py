"""What a finished run comes to: ``settlement_for(run, error)``, read on the worker's loop
thread once the body's ``try`` is over (``execute.py`` runs bodies, ``settle.py`` writes this).

The verdict, in order:

1. a step suspended the job (sleep, wait_for_event)             -> suspended, already written
2. the body committed ``ctx.transaction()``                  -> completed, already written
3. the lease is gone (cancelled, rescued, released)          -> write NOTHING
4. no error                                                  -> ack (batched)
5. the body snoozed (``xjobs.Snooze``)                       -> snoozed: ready at now + d, the
                                                                attempt not charged, no error;
                                                                past ``max_snoozes``: dead
6. the signal said drained when the body returned           -> interrupted: back to ready
                                                                now, the attempt not counted
7. otherwise the retry decision reads the error              -> retry with delay, or dead

(A run already settled, because a timeout won the race, never gets here: its late result is
ignored.) A snooze is judged before a drain: the body asked to run later, which a drain's
"ready now" would only undo.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..context import CANCELLED, DRAINED, LEASE_LOST, SLOT_LOST
from ..drivers.base import Nack
from ..retry import RetryVerdict, decide
from ..snooze import Snooze, SnoozeLimit
from .execute import Run
from .failures import describe, full_traceback

log = logging.getLogger("xjobs.worker")


@dataclass(frozen=True, slots=True)
class Settlement:
    outcome: str | None          # jobs_total outcome, or None when nothing is counted
    ack: bool = False
    nack: Nack | None = None
    verdict: RetryVerdict | None = None    # a failure's retry decision (for xjobs.on_error)
    error: BaseException | None = None     # what xjobs.on_error sees instead of what the body raised


def settlement_for(run: Run, error: BaseException | None, timed_out: bool = False) -> Settlement:
    if run.ctx.fence.suspended:
        # a sleep or a wait suspended the job in the transaction that recorded the step: not a
        # failure, no attempt burned, nothing more to write
        return Settlement("suspended")
    if run.ctx.completed_in_transaction:
        # the job IS completed, whatever the run was told afterwards
        if error is not None:
            log.warning("job %s#%s raised after its transaction committed; it stays completed: %s",
                        run.job.name, run.job.id, describe(error))
        elif run.result is not None and run.result != run.ctx.result_set:
            log.warning("job %s#%s returned a value after ctx.transaction() completed it; the job keeps "
                        "what ctx.set_result() gave inside the block", run.job.name, run.job.id)
        return Settlement("completed")
    code = run.signal.code if timed_out else run.code_at_return
    if code in (LEASE_LOST, CANCELLED):
        # somebody else owns the row now (or an operator ended it): write nothing
        return Settlement("cancelled" if code == CANCELLED else None)
    if error is None:
        return Settlement("completed", ack=True)
    if isinstance(error, Snooze) and not timed_out:
        return snoozed(run, error)
    if code == DRAINED and not timed_out:
        text = f"{describe(error)} -- interrupted by drain, attempt not counted"
        return Settlement("interrupted", nack=Nack(run.job.id, run.job.token, "interrupted", text))
    if code == SLOT_LOST:
        # its fleet-wide slot was taken from it (expired while this process stalled): the
        # job did not fail, it may not run beyond the cap
        text = f"{SLOT_LOST}: {run.signal.reason} -- interrupted, attempt not counted"
        return Settlement("interrupted", nack=Nack(run.job.id, run.job.token, "interrupted", text))
    verdict = decide(run.handle.retry, run.job.attempt, run.job.max_attempts, error,
                     retry_on=run.handle.retry_on, terminal_on=run.handle.terminal_on)
    text = f"{describe(error)} -- {verdict.reason}"
    nack = (Nack(run.job.id, run.job.token, "dead", text, traceback=full_traceback(error)) if verdict.dead
            else Nack(run.job.id, run.job.token, "retried", text, verdict.delay_ms, full_traceback(error)))
    return Settlement(nack.outcome, nack=nack, verdict=verdict)


def snoozed(run: Run, snooze: Snooze) -> Settlement:
    """Ready again after the snooze, the attempt given back, no error; the snooze past the
    job's ``max_snoozes`` is a dead letter instead (``X_SNOOZE_LIMIT``, reported like any).
    The count is the row's as claimed: only the holder of the claim writes it."""
    limit = run.handle.snoozing.max_snoozes
    if run.job.snoozes < limit:
        return Settlement("snoozed", nack=Nack(run.job.id, run.job.token, "snoozed", delay_ms=snooze.delay_ms))
    error = SnoozeLimit(f"job {run.job.name!r} snoozed {run.job.snoozes} times, its max_snoozes={limit}")
    verdict = RetryVerdict(True, 0.0, "dead: snooze limit reached, not run again")
    nack = Nack(run.job.id, run.job.token, "dead", f"{error} -- {verdict.reason}")
    return Settlement("dead", nack=nack, verdict=verdict, error=error)


def given_back(run: Run, why: str) -> Nack:
    """Back to ready now, the attempt not counted: the job did not fail, this worker let go."""
    return Nack(run.job.id, run.job.token, "interrupted", why)


__all__ = ["Settlement", "given_back", "settlement_for", "snoozed"]
