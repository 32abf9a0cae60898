"""The JobDriver seam: the only door between the runtime and storage.

Verbs are noun-first (``job_claim``, ``job_ack``). ``supervisor/`` and ``workers/`` never hold
SQL; everything they need from storage is a method here taking small frozen dataclasses.
Two drivers implement it: ``postgres`` (production) and ``memory`` (fast tests). One
conformance suite runs against both, so a semantic difference is a failing test.

Job states::

      enqueue ──> ready ──claim──> running ──ack──> completed
                   ^  ^               │
                   │  └──nack(retry)──┤──nack(dead)──> dead
                   │                  ├──nack(park)──> suspended ──due──> ready
                   └──lease lapses────┘
                      or its worker process died (released)
      cancel: ready | running | suspended ──> cancelled
      requeue: dead | cancelled ──> ready (attempt reset)

A job that was running when its worker process crashed is a SUSPECT (``crashes > 0``): the
ordinary claim skips it and only ``job_claim_alone`` hands it out, to a worker that runs it
with nothing beside it. A crash of a process running one job alone charges that job's
attempt; a crash of a process running several charges nobody and makes each a suspect. So a
job that kills its process is dead-lettered within its attempts, its neighbours never are.

Times are epoch milliseconds. "Now" is the database server's clock for a production driver
and the injected clock for one built with ``clock=`` (see ``postgres.py``); a delay that
should not depend on the enqueuing machine's clock is sent as ``delay_ms``, not as an
absolute ``run_at_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from ..clock import Clock
from ..errors import ClaimQueuesEmpty, InvalidOption
from ..options import finite_count, finite_option, duration_ms

STATES = ("ready", "running", "suspended", "completed", "dead", "cancelled")
LIVE_STATES = ("ready", "running", "suspended")
FINISHED_STATES = ("completed", "dead", "cancelled")
# what metrics count every few seconds: states an index holds apart from the finished bulk
COUNTED_STATES = ("ready", "running", "suspended", "dead")


@dataclass(frozen=True, slots=True)
class NewJob:
    name: str
    queue: str
    payload: bytes              # encoded JSON, already checked and size-limited
    idempotency_key: str
    tenant: str | None = None
    enqueued_by: str | None = None
    priority: int = 0
    max_attempts: int = 5
    run_at_ms: float | None = None   # an absolute time; None: now plus delay_ms
    delay_ms: float = 0.0            # added to the driver's now (the server's, in production)
    dedupe_window_ms: float | None = None   # keep the key this long after completion

    @property
    def namespace(self) -> tuple[str, str, str]:
        """The idempotency namespace: (name, tenant or '', key), as the unique index spells it."""
        return (self.name, self.tenant or "", self.idempotency_key)


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    deduped: bool


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: int
    name: str
    queue: str
    payload: Any
    tenant: str | None
    attempt: int
    max_attempts: int
    priority: int
    token: int


@dataclass(frozen=True, slots=True)
class Nack:
    """How a failed or stopped attempt settles.

    ``counts_as_attempt=False`` gives the attempt back (a drain interruption, a shed, a
    suspension); ``park`` moves the job to ``suspended`` until ``delay_ms`` has passed;
    ``dead`` dead-letters it. ``error`` lands in ``last_error`` (``None`` leaves it as is).
    """

    job_id: int
    token: int
    error: str | None
    delay_ms: float = 0.0
    counts_as_attempt: bool = True
    park: bool = False
    dead: bool = False
    outcome: str = "retried"    # recorded in the job's history: retried, dead, interrupted, ...


@dataclass(frozen=True, slots=True)
class Lease:
    job_id: int
    token: int


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
    history: tuple[dict, ...] = field(default=())
    crashes: int = 0            # worker-process crashes this job was caught in (a suspect: runs alone)
    progress: Any = None        # the latest ctx.progress() report: {"done", "total", "note", "at"}


@dataclass(frozen=True, slots=True)
class ListFilter:
    """Which jobs an operator verb reads or touches. ``since_ms``/``until_ms`` (absolute) or
    ``since_ago_ms``/``until_ago_ms`` (ages, taken back from the driver's now: the database's
    clock) bound when a job finished, or was created if it has not; ``error`` is a
    case-insensitive substring of ``last_error``; ``before_id`` pages backwards (newest
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


@dataclass(frozen=True, slots=True)
class Matching:
    """How many jobs match a filter, and the newest id among them (0 when none)."""

    count: int
    newest_id: int


@dataclass(frozen=True, slots=True)
class Released:
    """A running job of a dead worker process, handed back: ``outcome`` is ``interrupted`` (its
    supervisor stopped the process), ``quarantined`` (crashed beside other jobs: attempt given
    back, runs alone next), ``crashed`` (crashed running alone: attempt counted) or ``dead``."""

    id: int
    name: str
    queue: str
    state: str
    outcome: str


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A queue's fleet-wide switch (``xjobsd queues pause|resume``)."""

    name: str
    paused: bool
    changed_at: float
    changed_by: str | None


@dataclass(frozen=True, slots=True)
class Progress:
    """One run's latest ``ctx.progress()`` report, written fenced on its lease."""

    lease: "Lease"
    done: float
    total: float | None
    note: str | None
    at: float

    def as_json(self) -> dict:
        return {"done": self.done, "total": self.total, "note": self.note, "at": self.at}


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """Ready-now depth and the age of the oldest ready-now job, per queue."""

    depth: int
    oldest_ready_ms: float


def is_bigint(value: object) -> bool:
    """Whether a ``bigint`` column could hold it: a lease with any other id or token is held
    by nobody, on every driver."""
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def check_claim(queues: Sequence[str], limit: object, lease_ms: object) -> tuple[list[str], int, float]:
    """The one refusal for claim arguments, shared by every driver."""
    if isinstance(queues, str) or not queues:
        raise ClaimQueuesEmpty("claim needs a non-empty list of queue names")
    count = finite_count(limit, "claim.limit", minimum=0, maximum=100_000)
    lease = duration_ms(lease_ms, "claim.lease", exclusive_minimum=True)
    return list(queues), count, lease


MAX_DELAY_MS = 10 * 365 * 86_400_000.0   # the longest duration any option accepts
LATEST_MS = 253_402_300_799_000.0        # 9999-12-31T23:59:59Z, the last time every driver holds


def check_new_jobs(jobs: Sequence[NewJob]) -> None:
    """The refusal for delays, shared by every driver: a NaN or an overflowing delay would
    otherwise fail inside the database (or not at all, in memory)."""
    for job in jobs:
        if job.delay_ms:     # 0.0 is the common case and needs no check; NaN is truthy
            if job.run_at_ms is not None:
                raise InvalidOption("delay", "give delay_ms or run_at_ms, not both")
            finite_option(job.delay_ms, "delay", maximum=MAX_DELAY_MS)


CHARGES = ("alone", "suspect", "never")   # which lone job a crash's hand-back may charge


def check_charge(charge: object) -> str:
    if charge not in CHARGES:
        raise InvalidOption("charge", f"must be one of {', '.join(CHARGES)}, got {charge!r}")
    return str(charge)


def check_row_limit(limit: object, option: str = "limit") -> int:
    return finite_count(limit, option, minimum=0, maximum=100_000)


def check_filter(where: ListFilter) -> ListFilter:
    """The one refusal for operator filters, shared by every driver."""
    check_row_limit(where.limit)
    if where.state is not None and where.state not in STATES:
        raise InvalidOption("state", f"must be one of {', '.join(STATES)}, got {where.state!r}")
    for option in ("since_ms", "until_ms"):
        value = getattr(where, option)
        if value is not None:
            finite_option(value, option.removesuffix("_ms"), maximum=LATEST_MS)
    for option in ("since_ago_ms", "until_ago_ms"):
        value = getattr(where, option)
        if value is not None:
            duration_ms(value, option.removesuffix("_ago_ms"))
    if where.since_ms is not None and where.since_ago_ms is not None:
        raise InvalidOption("since", "give a time or an age, not both")
    if where.until_ms is not None and where.until_ago_ms is not None:
        raise InvalidOption("until", "give a time or an age, not both")
    for option in ("before_id", "after_id"):
        value = getattr(where, option)
        if value is not None and not is_bigint(value):
            raise InvalidOption(option.removesuffix("_id"), f"must be a job id, got {value!r}")
    if where.before_id is not None and where.after_id is not None:
        raise InvalidOption("after", "page backwards (before) or forwards (after), not both")
    return where


class JobDriver(Protocol):
    clock: Clock            # the injected clock of a test driver; never decides a row's fate
    server_clock: bool      # True: statements take now from the database server, not ``clock``

    # -- the queue ---------------------------------------------------------------------------
    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]: ...
    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float,
                  worker_id: str) -> list[ClaimedJob]: ...
    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0) -> list[ClaimedJob]: ...
    def job_ack_many(self, leases: Sequence[Lease]) -> set[int]: ...
    def job_nack(self, nack: Nack) -> bool: ...
    def job_heartbeat_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]: ...
    def job_rescue(self, limit: int) -> int: ...
    def job_release_worker(self, worker_id: str, *, crashed: bool = True, how: str = "died",
                           charge: str = "alone") -> list[Released]: ...
    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int) -> int: ...
    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]: ...
    def close(self) -> None: ...

    # -- introspection and operator verbs -------------------------------------------------------
    def job_list(self, where: ListFilter) -> list[JobView]: ...
    def job_get(self, job_id: int) -> JobView: ...
    def job_dead(self, limit: int) -> list[JobView]: ...
    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView: ...
    def job_requeue(self, job_id: int) -> JobView: ...
    def job_requeue_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                          reason: str | None) -> list[tuple[int, str | None]]: ...
    def job_cancel_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                         reason: str) -> list[int]: ...
    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching: ...
    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None: ...
    def queue_control(self) -> list[QueueControl]: ...
    def job_stats(self) -> dict[str, dict[str, int]]: ...
    def queue_summary(self) -> dict[str, QueueSummary]: ...
    def queue_counts(self) -> dict[str, dict[str, int]]: ...

    # -- convenience built on the batched verbs -----------------------------------------------
    def job_ack(self, job_id: int, token: int) -> bool: ...
    def job_heartbeat(self, job_id: int, token: int, lease_ms: float) -> bool: ...
