"""One backfill pass: the body of every backfill job (``backfill.py`` declares it).

In order:

1. ``environments``, against the ``environment`` setting: a refused pass raises
   ``X_BACKFILL_ENVIRONMENT`` (terminal) BEFORE the ledger is touched, so it leaves no row.
2. A completed run of the name blocks the pass (unless the input says ``force``): it sweeps
   nothing and answers ``{"skipped": ...}``; a checksum that moved since that run is logged
   (``backfill.checksum.moved``) and still does not run.
3. The ledger row of this run (``backfill_start``): new, or adopted by a retry.
4. The pages (``paging.in_pages``), the pacer's wait first inside each batch's step. A batch
   that ran reports the rows swept so far (absolute) to the ledger and ``ctx.progress``; a
   replayed one writes nothing (the flag is set inside its step body).
5. ``count(ctx)``, once, parsed: a whole number >= 0; more than 0 is ``X_BACKFILL_STALLED``.
6. ``completed`` with the total; any failure on the way is ``failed`` (a retry adopts the row).

A backfill over ``tenant="none"`` runs steps 4 and 5 inside ``ctx.cross_tenant`` with a reason
naming it: the grant is the run's (its ``ctx``), for the pass's duration, and the app's run
context (``run_context``) is entered outside it, by the worker, before the body.
A driver without a ledger (``ledger.ledger_of`` answers None) runs the pass unbooked.
"""

from __future__ import annotations

import contextlib
import logging
import math
from numbers import Integral
from typing import TYPE_CHECKING, Iterator

from ..config import current_settings
from ..drivers.ledger import BackfillFinish, BackfillLedger, BackfillRun, BackfillStart, ledger_of
from ..errors import InvalidOption
from .paging import PageProgress, in_pages
from .refusals import BackfillEnvironment, BackfillStalled

if TYPE_CHECKING:
    from ..context import Ctx
    from .backfill import BackfillSpec

log = logging.getLogger("xjobs.backfill")


def environment_refusal(spec: "BackfillSpec", environment: str | None) -> BackfillEnvironment | None:
    """Why ``spec`` may not run in ``environment``, or None: the pass's and the gate's one test."""
    if spec.environments is None or environment in spec.environments:
        return None
    here = "no environment (set XJOBS_ENVIRONMENT)" if environment is None else f"environment {environment!r}"
    return BackfillEnvironment(f"backfill {spec.name!r} runs only in {', '.join(spec.environments)}; this is {here}",
                               backfill=spec.name, environment=environment)


def parse_count(value: object, name: str) -> int:
    """``count``'s answer, checked: NaN and -1 compare as "not above 0", so unchecked they read
    as converged and write the completed row the check exists to prevent."""
    if isinstance(value, bool) or not isinstance(value, (Integral, float)) or (
            isinstance(value, float) and (not math.isfinite(value) or not value.is_integer())) or value < 0:
        raise InvalidOption("count", f"backfill {name!r}: count() must answer a whole number >= 0, got {value!r}")
    return int(value)


@contextlib.contextmanager
def _scope(ctx: "Ctx", spec: "BackfillSpec") -> Iterator[None]:
    if not spec.tenant_none:
        yield
        return
    with ctx.cross_tenant(spec.scope_reason):
        yield


def completed_run(ledger: BackfillLedger, spec: "BackfillSpec", *, other_than: int | None = None,
                  override: str) -> BackfillRun | None:
    """The latest completed run of ``spec`` (but ``other_than``, the run asking), which blocks
    another; a checksum that moved since it is warned about (``override`` says how to run it
    anyway) and still blocks. The pass and the command line's gate judge by this one rule."""
    done = [r for r in ledger.backfill_list(spec.name) if r.state == "completed" and r.job_id != other_than]
    if not done:
        return None
    last = done[-1]
    if last.checksum != spec.checksum:
        log.warning("backfill %s: its source or handle changed since run %s completed; not run again "
                    "(%s)", spec.name, last.job_id, override,
                    extra={"event": "backfill.checksum.moved", "backfill": spec.name, "run": last.job_id,
                           "checksum": spec.checksum, "was": last.checksum})
    return last


def _completed_before(ledger: BackfillLedger, spec: "BackfillSpec", job_id: int) -> object:
    last = completed_run(ledger, spec, other_than=job_id, override="force it to")
    if last is None:
        return None
    log.info("backfill %s: completed by run %s; skipped", spec.name, last.job_id,
             extra={"event": "backfill.skipped", "backfill": spec.name, "run": last.job_id})
    return {"skipped": "completed", "run": last.job_id, "rows": last.rows}


def run_pass(ctx: "Ctx", spec: "BackfillSpec", *, force: bool) -> object:
    environment = current_settings().environment
    refused = environment_refusal(spec, environment)
    if refused is not None:
        raise refused
    ledger = ledger_of(ctx.store)
    if ledger is not None and not force:
        skipped = _completed_before(ledger, spec, ctx.job_id)
        if skipped is not None:
            return skipped
    if ledger is not None:
        ledger.backfill_start(BackfillStart(ctx.job_id, spec.name, spec.checksum, environment))

    swept = 0

    def progress(page: PageProgress) -> None:
        nonlocal swept
        swept = page.rows       # absolute, replayed or not: what a failure records
        if page.ran:      # a replayed batch writes nothing: the next one that runs is absolute
            if ledger is not None:
                ledger.backfill_progress(ctx.job_id, page.rows)
            ctx.progress(page.rows, None, f"batch {page.index}")

    def work(rows: object, page: int) -> None:
        spec.handle(rows)

    try:
        with _scope(ctx, spec):
            result = in_pages(ctx, spec.source, work, limit=spec.batch, prefix="batch",
                              before=lambda: spec.pacer.wait(ctx.signal), on_page=progress)
            if spec.count is not None:
                left = parse_count(spec.count(ctx), spec.name)
                if left > 0:
                    raise BackfillStalled(f"backfill {spec.name!r}: the source ran out after {swept} rows "
                                          f"while count() still finds {left}", backfill=spec.name, left=left)
    except Exception as exc:
        if ledger is not None:
            ledger.backfill_finish(BackfillFinish(ctx.job_id, "failed", swept, f"{type(exc).__name__}: {exc}"))
        raise
    rows = result.rows
    if ledger is not None:
        ledger.backfill_finish(BackfillFinish(ctx.job_id, "completed", rows))
    log.info("backfill %s: completed, %d rows in %d batches (%d run now, %d replayed)", spec.name, rows,
             result.pages, result.ran, result.replayed,
             extra={"event": "backfill.completed", "backfill": spec.name, "rows": rows,
                    "batches": result.pages, "ran": result.ran, "replayed": result.replayed})
    return {"rows": rows, "batches": result.pages, "ran": result.ran, "replayed": result.replayed}


__all__ = ["environment_refusal", "parse_count", "run_pass"]
