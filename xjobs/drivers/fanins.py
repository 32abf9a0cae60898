"""Fan-ins: an OPTIONAL driver capability (``driver.fanins``), like the backfill ledger.

A fan-in is one row that counts the members of a group of jobs not settled yet. A parent's
``ctx.step.invoke``/``ctx.step.map`` opens one per step; ``xjobs.batch`` opens one with no
parent. The settlement of each member (completed, dead or cancelled, by whatever verb) takes
one off in the statement that settles it, and the one that takes it to 0 wakes the fan-in's
waiter in the same transaction: the parent, suspended as a wait suspends it, or the batch's callback,
inserted suspended with no wake-up time. Never a poll, never a wake per member.

* ``fanin_open(lease, FanOut)``: in ONE transaction fenced on the parent's claim: the step
  recorded (kind ``map``), the fan-in and its children inserted the first time (a chunk per
  round trip), then either the members as they settled (``FanInOutcome.members``, when none is
  pending) or the parent suspended. A replay finds the fan-in and inserts nothing.
* ``fanin_complete(lease, name, attempt, result)``: the step recorded completed with the
  results, so later replays never read the members again.
* ``batch_open(NewBatch)``: the callback (suspended), the fan-in and the members, one
  transaction. An empty batch wakes its callback at once.
* ``fanin_get(id)``; ``job_children(job_id, limit)``: counts by state and the first page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

from .records import Lease, NewJob

MEMBER_STATES = ("completed", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class FanOut:
    """A parent's fan-out step: its children, built and checked, in chunks of one round trip
    each (``total`` of them in all, in input order)."""

    name: str
    attempt: int
    total: int
    chunks: Iterable[Sequence[NewJob]]


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a fan-in as it settled: ``result`` is its stored return value."""

    index: int
    id: int
    state: str
    error: str | None
    result: Any


@dataclass(frozen=True, slots=True)
class FanInOutcome:
    """What opening (or replaying) a fan-out came to: ``members`` in input order once none is
    pending; else the parent is suspended (``suspended``), or ``fenced``: the run no longer owns
    its job and nothing was written. ``completed``: the step was recorded completed on an
    earlier attempt, its results in ``value``."""

    fanin_id: int | None
    members: tuple[Member, ...] | None = None
    suspended: bool = False
    fenced: bool = False
    completed: bool = False
    value: Any = None


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch: its members in chunks, and its callback (its payload the envelope
    ``{"input": ...}`` the counts are merged into when the last member settles)."""

    total: int
    chunks: Iterable[Sequence[NewJob]]
    callback: NewJob


@dataclass(frozen=True, slots=True)
class BatchOpened:
    id: int
    callback_id: int
    member_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FanInView:
    id: int
    parent_id: int | None
    step: str | None
    waiter_id: int | None
    total: int
    pending: int
    completed: int
    dead: int
    cancelled: int
    woken: int
    created_at: float
    settled_at: float | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "parent_id": self.parent_id, "step": self.step, "waiter_id": self.waiter_id,
                "total": self.total, "pending": self.pending, "completed": self.completed, "dead": self.dead,
                "cancelled": self.cancelled, "woken": self.woken, "created_at": self.created_at,
                "settled_at": self.settled_at}


@dataclass(frozen=True, slots=True)
class ChildRow:
    id: int
    name: str
    state: str
    step: str | None


@dataclass(frozen=True, slots=True)
class Children:
    """A job's children: how many in each state, and the first page of them by id."""

    counts: dict[str, int]
    first: tuple[ChildRow, ...]

    def as_json(self) -> dict[str, Any]:
        return {"total": sum(self.counts.values()), "counts": dict(sorted(self.counts.items())),
                "first": [{"id": c.id, "name": c.name, "state": c.state, "step": c.step} for c in self.first]}


@runtime_checkable
class FanInStore(Protocol):
    def fanin_open(self, lease: Lease, fan: FanOut) -> FanInOutcome: ...
    def fanin_complete(self, lease: Lease, name: str, attempt: int, result: bytes) -> bool: ...
    def batch_open(self, batch: NewBatch) -> BatchOpened: ...
    def fanin_get(self, fanin_id: int) -> FanInView | None: ...
    def job_children(self, job_id: int, limit: int) -> Children: ...
    def job_parent(self, job_id: int) -> tuple[int, str | None] | None: ...


def fanins_of(driver: object) -> FanInStore | None:
    """The driver's fan-ins, or None when it has none."""
    found = getattr(driver, "fanins", None)
    return found if isinstance(found, FanInStore) else None


def child_key_prefix(parent_id: int, step: str) -> str:
    """The idempotency key of a child, but for its index: one child per (parent, step, index)."""
    return f"child:{parent_id}:{step}:"


def batch_key_prefix(fanin_id: int) -> str:
    return f"batch:{fanin_id}:"


def member_document(job: NewJob, index: int) -> dict[str, Any]:
    """A member as ``fanin_enqueue``'s row document: the job's, with its index; its key is the
    fan-in's, made by the statement."""
    doc = job.document()
    doc.pop("k", None)
    doc.pop("w", None)
    doc["i"] = index
    return doc


__all__ = ["MEMBER_STATES", "FanOut", "Member", "FanInOutcome", "NewBatch", "BatchOpened", "FanInView",
           "ChildRow", "Children", "FanInStore", "fanins_of", "child_key_prefix", "batch_key_prefix",
           "member_document"]
