"""The records of the operator's reads (``base.py``'s ``Introspection`` and ``QueueStore``): the
queues' summary, the outcome series the dashboard charts, the dead letters in groups and a
page of the running jobs. Re-exported by ``records.py``, where the seam has always found them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """Ready-now depth and the age of the oldest ready-now job, per queue."""

    depth: int
    oldest_ready_ms: float


@dataclass(frozen=True, slots=True)
class RatePoint:
    """How many runs of ``queue`` ended in ``outcome`` during the minute starting at
    ``minute`` (epoch ms), fleet-wide, as workers reported them."""

    queue: str
    minute: float
    outcome: str
    count: int


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """Dead letters of one job name in one queue whose errors start alike (``error``: the
    first characters every one of them shares), with how many and the newest."""

    queue: str
    name: str
    error: str
    count: int
    newest_id: int
    newest_at: float | None


@dataclass(frozen=True, slots=True)
class RunningPage:
    """Which running jobs ``job_running`` answers: those of ``queue`` (None: every queue),
    newest started first, at most ``limit``; ``before`` (a row's ``started_at`` and ``id``)
    pages on to the ones started before it (keyset: ties on the time go by id)."""

    queue: str | None = None
    limit: int = 50
    before: tuple[float, int] | None = None
