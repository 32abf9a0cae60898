"""The records of the coordination nouns (``base.py``: leader, schedule, outbox, slots): what
the verbs that coordinate many processes through rows take and answer."""

from __future__ import annotations

from dataclasses import dataclass

from .records import NewJob


@dataclass(frozen=True, slots=True)
class LeaderView:
    holder: str
    expires_at: float
    elected_at: float
    live: bool


@dataclass(frozen=True, slots=True)
class Watermark:
    """A cron task's dispatch watermark: occurrences up to ``watermark_ms`` are dispatched."""

    task: str
    watermark_ms: int
    updated_at: float
    dispatched: int


@dataclass(frozen=True, slots=True)
class Dispatch:
    election: str
    holder: str
    task: str
    expected_ms: int | None        # the watermark the dispatcher read (None: never dispatched)
    watermark_ms: int              # where it moves to
    jobs: tuple[NewJob, ...] = ()


@dataclass(frozen=True, slots=True)
class OutboxClaim:
    """A batch held by one relay: ``ids`` and their jobs, in (staged_at, id) order."""

    token: int
    holder: str
    ids: tuple[int, ...]
    jobs: tuple[NewJob, ...]


@dataclass(frozen=True, slots=True)
class OutboxSummary:
    pending: int
    oldest_ms: float


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """``slot_acquire``: one of the ``cap`` fleet-wide slots of ``job``, for ``holder``, held
    for ``lease_ms`` unless renewed."""

    job: str
    cap: int
    holder: str
    lease_ms: float


@dataclass(frozen=True, slots=True)
class Slot:
    """A slot ``slot_acquire`` granted: ``slot`` of ``job``, held by ``holder``; what
    ``slot_renew`` and ``slot_release`` are fenced on."""

    job: str
    slot: int
    holder: str
