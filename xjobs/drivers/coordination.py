"""The driver nouns that coordinate many processes on many machines through rows: the
scheduler's leader lease and watermarks, the transactional outbox, and fleet-wide job slots.

Each is a small typed Protocol with noun-first verbs taking frozen dataclasses; both drivers
implement all of them, and one conformance suite runs against both. Every decision about a
row's fate is taken on the database's clock, in the statement that acts on it.

* **leader** — ``leader_elect(election, holder, lease_ms)`` takes a free or expired lease, or
  renews this holder's; ``leader_resign`` expires it now. Never a session advisory lock: a
  pooled connection would carry it to whoever borrows that connection next.
* **schedule** — ``schedule_dispatch(Dispatch)`` is ONE transaction: the leader row is locked
  and must still be this holder's, the task's watermark moves from ``expected_ms`` to
  ``watermark_ms`` (compare-and-set), and the occurrences' jobs are enqueued. Answers None
  when fenced out (no longer the leader, or somebody else moved the watermark).
* **outbox** — ``outbox_stage`` writes rows in the caller's transaction; ``outbox_claim``
  takes a batch as a lease (token, holder, time, stamped where the rows are locked), in
  (staged_at, id) order; ``outbox_publish`` enqueues the batch and marks it published in ONE
  transaction, fenced on the claim's token (all or nothing: no row is ever published twice,
  none is lost); ``outbox_release`` hands a batch back, fenced the same way. A claim older
  than its lease is free again (its relay died mid-batch).
* **slots** — ``slot_acquire(job, cap, holder, lease_ms)`` grants one of ``cap`` rows keyed
  (job, slot): the primary key is the serialisation, nothing counts and then acts;
  ``slot_renew`` is fenced on the holder AND on the slot not having expired; ``slot_release``
  deletes the holder's row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from .base import Enqueued, NewJob


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


class LeaderStore(Protocol):
    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool: ...
    def leader_resign(self, election: str, holder: str) -> bool: ...
    def leader_get(self, election: str) -> LeaderView | None: ...


class ScheduleStore(Protocol):
    def clock_now_ms(self) -> float: ...
    def schedule_state(self) -> list[Watermark]: ...
    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None: ...


class OutboxStore(Protocol):
    def outbox_stage(self, jobs: Sequence[NewJob], conn: Any) -> list[int]: ...
    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim: ...
    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None: ...
    def outbox_release(self, claim: OutboxClaim) -> int: ...
    def outbox_prune(self, retention_ms: float, limit: int) -> int: ...
    def outbox_summary(self) -> OutboxSummary: ...


class SlotStore(Protocol):
    def slot_acquire(self, job: str, cap: int, holder: str, lease_ms: float) -> int | None: ...
    def slot_renew(self, job: str, slot: int, holder: str, lease_ms: float) -> bool: ...
    def slot_release(self, job: str, slot: int, holder: str) -> bool: ...
    def slot_held(self) -> dict[str, int]: ...
