"""The gate ``xjobsd backfill run`` passes a backfill through before it enqueues a pass.

``gate(...)`` RETURNS its refusal (an ``XJobsError`` with its code, never raised), so ``--all``
judges each name alone and goes on past one that is refused: a thrown verdict would let one
wedged backfill block every later one. The order is the order an operator can act in:

1. ``X_BACKFILL_ENVIRONMENT``: ``environments`` leaves this environment out. A pre-check of
   the pass's own test, so the command refuses before it queues work that would only fail.
2. ``X_BACKFILL_REQUIRES``: the ``requires`` precondition (the migration it waits on) is not met,
   or raised. Checked here only: it needs a database connection and the app's tables.
3. ``X_BACKFILL_ALREADY_RAN``: a run of it completed (only ``completed`` blocks; ``force``
   passes it). A live pass is judged by the enqueue, which sees the one live key without racing it.
"""

from __future__ import annotations

from typing import Any, Callable

from ..drivers.ledger import ledger_of
from .backfill import BackfillSpec
from .backfill_pass import completed_run, environment_refusal
from .refusals import BackfillAlreadyRan, BackfillRefused, BackfillRequires

Connect = Callable[[], Any]      # opens a connection for ``requires`` (a context manager), or None


def _requires(spec: BackfillSpec, connect: Connect | None) -> BackfillRefused | None:
    if spec.requires is None:
        return None
    try:
        if connect is None:
            met = spec.requires(None)
        else:
            with connect() as conn:
                met = spec.requires(conn)
    except Exception as exc:    # the app's precondition failing is a refusal, never a crash of --all
        met = f"requires raised {type(exc).__name__}: {exc}"
    if met is True:
        return None
    why = met if isinstance(met, str) and met else "its requires precondition is not met"
    return BackfillRequires(f"backfill {spec.name!r}: {why}", backfill=spec.name)


def gate(spec: BackfillSpec, *, driver: object, environment: str | None, force: bool = False,
         connect: Connect | None = None) -> BackfillRefused | None:
    """Why ``spec`` may not be enqueued now, or None (see the module's docstring)."""
    refused = environment_refusal(spec, environment) or _requires(spec, connect)
    if refused is not None or force:
        return refused
    ledger = ledger_of(driver)
    if ledger is None:
        return None
    last = completed_run(ledger, spec, override="--force runs it")
    if last is None:
        return None
    return BackfillAlreadyRan(f"backfill {spec.name!r} already ran: run {last.job_id} completed with "
                              f"{last.rows} rows (--force runs a new pass)", backfill=spec.name, run=last.job_id)


__all__ = ["gate"]
