"""The records operators read at the driver seam: a job as ``jobs ls|show`` and the dashboard
see it, its history and progress, the filters and batches of the bulk verbs, the queues'
summaries, dead-letter groups and running jobs. ``records.py`` re-exports every one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from .records_steps import StepRecord


class HistoryEntry(TypedDict):
    """One row of a job's history: an attempt's outcome, or an operator's verb."""
    at: float                   # epoch milliseconds
    attempt: int
    outcome: str
    error: str | None
    traceback: str | None
    by: NotRequired[str | None]  # who: an enqueuer or a worker's identity (views.life's lines)


class ProgressReport(TypedDict):
    """A run's latest ``ctx.progress()`` report, as it is stored."""
    done: float
    total: float | None
    note: str | None
    at: float


@dataclass(frozen=True, slots=True)
class KeyPlace:
    """What ``job_get`` adds for a keyed job (``job(concurrency_key=...)``): its key, its job's
    concurrency there, whether a dead member keeps its place, and whether it waits for a
    place; ``holders``: the members holding the key's places now, in id order."""

    key: str
    cap: int
    hold: bool
    waiting: bool
    holders: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as operators see it (``xjobsd jobs ls|show --json``)."""

    id: int
    name: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    tenant: str | None
    idempotency_key: str
    priority: int
    run_at: float
    last_error: str | None
    created_at: float
    finished_at: float | None
    enqueued_by: str | None = None
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    payload: Any = None
    history: tuple[HistoryEntry, ...] = field(default=())
    crashes: int = 0            # worker-process crashes this job was caught in (a suspect: runs alone)
    progress: ProgressReport | None = None   # the latest ctx.progress() report
    steps: tuple[StepRecord, ...] = ()    # what job_get adds: the recorded steps, in order
    traceparent: str | None = None          # what job_get adds: the enqueuing code's W3C trace context
    started_at: float | None = None         # what job_get adds: when its latest run began (by claimed_by)
    result: Any = None                      # what job_get adds: the completed body's return value (JSON)
    snoozes: int = 0                        # what job_get adds: how often it snoozed (xjobs.Snooze)
    key: KeyPlace | None = None             # what job_get adds: its concurrency key (None: not keyed)
    fair_key: str | None = None             # what job_get adds: the key of its fair claims (job(fairness=))
    base_priority: int | None = None        # what job_get adds: its priority at enqueue, once aging moved it


@dataclass(frozen=True, slots=True)
class ListFilter:
    """Which jobs an operator verb reads or touches. ``since_ms``/``until_ms`` (absolute) or
    ``since_ago_ms``/``until_ago_ms`` (ages, taken back from the driver's now: the database's
    clock) bound when a job finished, or was created if it has not; ``error`` is a
    case-insensitive substring of ``last_error``, ``error_group`` its first
    ``ERROR_GROUP_WIDTH`` characters exactly (a dead-letter group); ``before_id`` pages backwards (newest
    first), ``after_id`` forwards."""

    queue: str | None = None
    name: str | None = None
    state: str | None = None
    limit: int = 50
    tenant: str | None = None
    since_ms: float | None = None
    until_ms: float | None = None
    error: str | None = None
    before_id: int | None = None
    after_id: int | None = None
    since_ago_ms: float | None = None
    until_ago_ms: float | None = None
    error_group: str | None = None   # exactly these first ERROR_GROUP_WIDTH characters of last_error
    parent_id: int | None = None     # only the children of this job (ctx.step.invoke/map)


@dataclass(frozen=True, slots=True)
class Batch:
    """One bounded batch of a bulk verb (``job_requeue_batch``, ``job_cancel_batch``): jobs
    matching ``where`` with ``after_id < id <= upto_id``, in id order, at most ``limit``."""

    where: ListFilter
    after_id: int
    upto_id: int
    limit: int


@dataclass(frozen=True, slots=True)
class Matching:
    """How many jobs match a filter, and the newest id among them (0 when none)."""

    count: int
    newest_id: int


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


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job running now: who holds it (``claimed_by``, a process identity), since when (the
    current attempt's claim), its lease and its latest ``ctx.progress()`` report."""

    id: int
    name: str
    queue: str
    attempt: int
    max_attempts: int
    tenant: str | None
    claimed_by: str | None
    started_at: float
    lease_expires_at: float | None
    progress: ProgressReport | None
