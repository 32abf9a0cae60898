"""The memory driver's table: one row of ``jobs``, and the column types it must copy.

A ``timestamptz`` holds whole microseconds; the memory driver rounds exactly where the Postgres
columns would, or the two drivers drift apart on the
values the conformance suite compares.
"""

from __future__ import annotations

from dataclasses import dataclass


def ts(ms: float) -> float:
    """A time as a ``timestamptz`` column holds it: whole microseconds."""
    return round(ms * 1000.0) / 1000.0


def plus(at: float, ms: float) -> float:
    """``{now} + ms * interval '1 millisecond'``: both sides in whole microseconds."""
    return ts(at + ts(ms))


@dataclass(slots=True)
class Row:
    """One row of ``jobs``."""

    id: int
    name: str
    queue: str
    state: str
    payload: bytes
    tenant: str | None
    enqueued_by: str | None
    idempotency_key: str
    priority: int
    max_attempts: int
    run_at: float
    created_at: float
    attempt: int = 0
    lease_token: int | None = None
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    last_error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    crashes: int = 0
    dedupe_window_ms: float | None = None
    progress: dict | None = None

    @property
    def namespace(self) -> tuple[str, str, str]:
        return (self.name, self.tenant or "", self.idempotency_key)
