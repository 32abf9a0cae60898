"""The JobDriver seam: the only door between the runtime and storage.

Verbs are noun-first (``job_claim``, ``job_ack``). ``supervisor/`` and ``workers/`` never hold
SQL; everything they need from storage is a method of ``JobDriver`` (below) taking small frozen
dataclasses, and every consumer names that Protocol (or the one noun it needs). It is the
union of four nouns: ``JobStore`` (the hot path of one run: enqueue, claim, settle, renew,
listen, transaction), ``Maintenance`` (rescue, hand-back of a dead worker's jobs, prune,
sessions), ``Introspection`` (the operator's verbs on jobs) and ``QueueStore`` (queue control
and statistics), plus the lifecycle (``migrate``, ``ping``, ``close``).

Two drivers implement it: ``postgres`` (production) and ``memory`` (fast tests). Both are a
``CheckedDriver`` (``facade.py``): its verbs refuse bad arguments once (``refusals.py``) and
hand what they checked to the driver's own collaborators (``backend.py``), so no driver checks
twice and a new driver cannot forget a check. One conformance suite runs against both, so a
semantic difference is a failing test.

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
and the injected clock for one built with ``clock=`` (see ``pg_database.py``); a delay that
should not depend on the enqueuing machine's clock is sent as ``delay_ms``, not as an
absolute ``run_at_ms``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from ..clock import Clock

STATES = ("ready", "running", "suspended", "completed", "dead", "cancelled")
LIVE_STATES = ("ready", "running", "suspended")
FINISHED_STATES = ("completed", "dead", "cancelled")
# what metrics count every few seconds: states an index holds apart from the finished bulk
COUNTED_STATES = ("ready", "running", "suspended", "dead")
CHARGES = ("alone", "suspect", "never")   # which lone job a crash's hand-back may charge
MAX_DELAY_MS = 10 * 365 * 86_400_000.0   # the longest duration any option accepts
LATEST_MS = 253_402_300_799_000.0        # 9999-12-31T23:59:59Z, the last time every driver holds


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

    lease: Lease
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


class JobListener(Protocol):
    """What ``job_listen`` answers: ``fileno()`` goes into a worker's selector (``None``: nothing
    to wait on, the poll timer covers); ``poll()`` answers, without blocking, the queues that
    got new ready jobs since the last poll."""

    def fileno(self) -> int | None: ...
    def poll(self) -> set[str]: ...
    def close(self) -> None: ...


class JobTransactions(Protocol):
    """The one capability a run's ``Ctx`` needs: ``ctx.transaction()``."""

    def job_transaction(self, lease: Lease) -> AbstractContextManager[Any]:
        """A connection in a transaction that, on a clean exit, also completes the job fenced on
        ``lease``; a lost lease rolls it all back with ``LeaseLost``. What it yields is the
        driver's connection (a psycopg one in production), for the body's own statements."""
        ...


class JobStore(JobTransactions, Protocol):
    """The hot path of one run: enqueue, claim, settle (ack, nack), renew (heartbeat), report."""

    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]:
        """Insert, or answer the live holder of each key (``deduped``); ``conn``: join the
        caller's transaction (a psycopg connection, or what the memory driver's
        ``job_transaction`` yields)."""
        ...

    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float,
                  worker_id: str) -> list[ClaimedJob]: ...
    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0) -> list[ClaimedJob]: ...
    def job_ack_many(self, leases: Sequence[Lease]) -> set[int]: ...
    def job_ack(self, job_id: int, token: int) -> bool: ...
    def job_nack(self, nack: Nack) -> bool: ...
    def job_heartbeat_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]: ...
    def job_heartbeat(self, job_id: int, token: int, lease_ms: float) -> bool: ...
    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]: ...

    def job_listen(self) -> JobListener:
        """A listener for new ready jobs (Postgres: LISTEN on a dedicated connection; memory:
        one with nothing to wait on)."""
        ...


class Maintenance(Protocol):
    """Upkeep of the jobs table: lapsed leases, due suspensions, dead workers, retention."""

    def job_rescue(self, limit: int = 1000) -> int:
        """Hand back lapsed leases, then wake due suspensions; each bounded by ``limit``."""
        ...

    def job_release_worker(self, worker_id: str, *, crashed: bool = True, how: str = "died",
                           charge: str = "alone") -> list[Released]: ...
    def job_prune(self, completed_for_ms: float, finished_for_ms: float,
                  limit: int = 1000) -> int: ...

    def session_count(self, application_name: str) -> int:
        """Open sessions announcing ``application_name`` (a child's identity): its jobs are
        handed back only once none is left (always 0 on memory)."""
        ...


class Introspection(Protocol):
    """The operator's verbs on jobs (``xjobsd jobs``, ``admin.py``)."""

    def job_list(self, where: ListFilter) -> list[JobView]: ...
    def job_get(self, job_id: int) -> JobView: ...
    def job_dead(self, limit: int = 50) -> list[JobView]: ...
    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView: ...
    def job_requeue(self, job_id: int) -> JobView: ...
    def job_requeue_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                          reason: str | None) -> list[tuple[int, str | None]]: ...
    def job_cancel_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                         reason: str) -> list[int]: ...
    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching: ...
    def job_stats(self) -> dict[str, dict[str, int]]: ...


class QueueStore(Protocol):
    """Queue control (fleet-wide pause) and the per-queue statistics metrics read."""

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None: ...
    def queue_control(self) -> list[QueueControl]: ...
    def queue_summary(self) -> dict[str, QueueSummary]: ...
    def queue_counts(self) -> dict[str, dict[str, int]]: ...


class JobDriver(JobStore, Maintenance, Introspection, QueueStore, Protocol):
    """The whole seam, and its lifecycle: install the schema, prove the database answers, close."""

    @property
    def clock(self) -> Clock:
        """The injected clock of a test driver; never decides a row's fate in production."""
        ...

    @property
    def server_clock(self) -> bool:
        """True: statements take now from the database server, not ``clock``."""
        ...

    def migrate(self, *, lock_timeout_ms: float = 10_000.0) -> None:
        """Install or upgrade the schema (nothing to do on memory); idempotent."""
        ...

    def ping(self, timeout_s: float) -> None:
        """Raise unless the database answers a fresh connection within ``timeout_s``."""
        ...

    def close(self) -> None: ...
