"""The backfill ledger: an OPTIONAL driver capability, like ``SlotStore``.

A driver that has one exposes it as ``driver.backfills`` (both shipped drivers do:
``PgLedger``, ``MemoryLedger``); ``ledger_of(driver)`` answers it or None, and a driver
without one runs backfills unbooked (nothing blocks a completed name there) rather than
refusing them.

One row per RUN (the pass's job id), never per name: a forced pass is a new job and so a new
row. The ledger is what a pass has SWEPT and the record that a name is done; where a pass
resumes is its step checkpoints, never this row.

* ``backfill_start(BackfillStart)``: a new run's row (``running``), or the same run's row
  adopted by a retry: back to ``running``, its ``started_at`` kept, ``completed_at`` cleared.
* ``backfill_progress(job_id, rows)``: the rows swept so far, ABSOLUTE, on a running row.
* ``backfill_finish(BackfillFinish)``: ``completed`` or ``failed``, the total, the time.
* ``backfill_list(name=None)``: every run (or one name's), by name then start.

Times are epoch milliseconds, as everywhere on the seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import InvalidOption
from ..options import finite_count, plain_name

LEDGER_STATES = ("running", "completed", "failed")
FINISHED = ("completed", "failed")
MAX_RUNS = 10_000      # the most rows one listing answers
_MAX_TEXT = 4000


@dataclass(frozen=True, slots=True)
class BackfillRun:
    """One row of the ledger."""

    job_id: int
    name: str
    state: str
    rows: int
    started_at: float
    completed_at: float | None
    checksum: str
    environment: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class BackfillStart:
    job_id: int
    name: str
    checksum: str
    environment: str | None


@dataclass(frozen=True, slots=True)
class BackfillFinish:
    job_id: int
    state: str
    rows: int
    error: str | None = None


@runtime_checkable
class BackfillLedger(Protocol):
    def backfill_start(self, start: BackfillStart) -> BackfillRun: ...
    def backfill_progress(self, job_id: int, rows: int) -> bool: ...
    def backfill_finish(self, finish: BackfillFinish) -> bool: ...
    def backfill_list(self, name: str | None = None) -> list[BackfillRun]: ...


def ledger_of(driver: object) -> BackfillLedger | None:
    """The driver's ledger, or None: the capability is optional."""
    ledger = getattr(driver, "backfills", None)
    return ledger if isinstance(ledger, BackfillLedger) else None


def _job_id(value: object) -> int:
    return finite_count(value, "backfill.job_id", minimum=1, maximum=2**63 - 1)


def _rows(value: object) -> int:
    return finite_count(value, "backfill.rows", minimum=0, maximum=2**63 - 1)


def _text(value: object, option: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidOption(option, "must be a string without NUL characters")
    return value[:_MAX_TEXT]


class CheckedLedger(BackfillLedger):
    """The ledger's door: every argument refused or normalised once, then the driver's own."""

    def __init__(self, ledger: BackfillLedger) -> None:
        self._ledger = ledger

    def backfill_start(self, start: BackfillStart) -> BackfillRun:
        checksum = _text(start.checksum, "backfill.checksum")
        if not checksum:
            raise InvalidOption("backfill.checksum", "must be a non-empty string")
        return self._ledger.backfill_start(BackfillStart(
            _job_id(start.job_id), plain_name(start.name, "backfill.name"), checksum,
            _text(start.environment, "backfill.environment")))

    def backfill_progress(self, job_id: int, rows: int) -> bool:
        return self._ledger.backfill_progress(_job_id(job_id), _rows(rows))

    def backfill_finish(self, finish: BackfillFinish) -> bool:
        if finish.state not in FINISHED:
            raise InvalidOption("backfill.state", f"must be one of {', '.join(FINISHED)}, got {finish.state!r}")
        return self._ledger.backfill_finish(BackfillFinish(
            _job_id(finish.job_id), finish.state, _rows(finish.rows), _text(finish.error, "backfill.error")))

    def backfill_list(self, name: str | None = None) -> list[BackfillRun]:
        return self._ledger.backfill_list(None if name is None else plain_name(name, "backfill.name"))


__all__ = ["BackfillFinish", "BackfillLedger", "BackfillRun", "BackfillStart", "CheckedLedger",
           "FINISHED", "LEDGER_STATES", "MAX_RUNS", "ledger_of"]
