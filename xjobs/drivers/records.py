"""The records the driver seam passes around: small frozen dataclasses, and the constants
of a job's life (its states, the crash charges, the longest durations and latest times).

``base.py`` holds the Protocols that take and answer these; ``records`` has no behaviour
beyond a record's own view of itself, so every module can import it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from ..payload import compact

STATES = ("ready", "running", "suspended", "completed", "dead", "cancelled")
LIVE_STATES = ("ready", "running", "suspended")
FINISHED_STATES = ("completed", "dead", "cancelled")
# what metrics count every few seconds: states an index holds apart from the finished bulk
COUNTED_STATES = ("ready", "running", "suspended", "dead")
CHARGES = ("alone", "suspect", "never")   # which lone job a crash's hand-back may charge
MAX_DELAY_MS = 10 * 365 * 86_400_000.0   # the longest duration any option accepts
LATEST_MS = 253_402_300_799_000.0        # 9999-12-31T23:59:59Z, the last time every driver holds
ENQUEUE_CHUNK = 5_000                     # jobs per enqueue statement: a larger call is sent in chunks
ERROR_GROUP_WIDTH = 200                   # the characters of last_error a dead-letter group shares


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
    traceparent: str | None = None   # the W3C trace context of the enqueuing code

    @property
    def namespace(self) -> tuple[str, str, str]:
        """The idempotency namespace: (name, tenant or '', key), as the unique index spells it."""
        return (self.name, self.tenant or "", self.idempotency_key)

    def document(self) -> dict[str, Any]:
        """The job as the enqueue statement's row document (and as an outbox row keeps it);
        the payload is embedded as encoded, never decoded and encoded again."""
        return {"n": self.name, "q": self.queue, "p": orjson.Fragment(self.payload),
                "k": self.idempotency_key, "t": self.tenant, "e": self.enqueued_by,
                "pr": self.priority, "m": self.max_attempts, "r": self.run_at_ms, "d": self.delay_ms,
                "w": self.dedupe_window_ms, "tp": self.traceparent}

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> "NewJob":
        """Back from a row document whose payload came back decoded (a jsonb column)."""
        return cls(name=doc["n"], queue=doc["q"], payload=compact(orjson.dumps(doc["p"])), idempotency_key=doc["k"],
                   tenant=doc.get("t"), enqueued_by=doc.get("e"), priority=doc.get("pr", 0),
                   max_attempts=doc.get("m", 5), run_at_ms=doc.get("r"), delay_ms=doc.get("d") or 0.0,
                   dedupe_window_ms=doc.get("w"), traceparent=doc.get("tp"))


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    deduped: bool


@dataclass(frozen=True, slots=True)
class TenantRoom:
    """What a worker's per-process tenant limits leave room for, for ``job_claim``: no job of
    a ``blocked`` tenant, and no more of one tenant than ``ceiling`` minus what this worker
    already runs of it (``held``; ``""`` is the jobs without a tenant). ``ceiling`` None: only
    the blocked list applies."""

    ceiling: int | None = None
    held: Mapping[str, int] = field(default_factory=dict)
    blocked: tuple[str, ...] = ()


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
    traceparent: str | None = None


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
    traceback: str | None = None   # the failure's full traceback, for the history (bounded)


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
    steps: tuple["StepRecord", ...] = ()    # what job_get adds: the recorded steps, in order
    traceparent: str | None = None          # what job_get adds: the enqueuing code's W3C trace context


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


# -- the coordination nouns (see base.py: leader, schedule, outbox, slots) --------------------


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


# -- durable steps and events (see base.py: StepStore, EventStore) -----------------------------

STEP_KINDS = ("run", "sleep", "wait")
STEP_STATES = ("completed", "sleeping", "waiting")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step of a job: ``result`` is the stored JSON (a wait's event payload, None
    on its timeout); ``seq`` orders the steps of a job as they were first recorded;
    ``wake_at`` is when a sleep ends or a wait times out (None: a wait without a timeout)."""

    name: str
    kind: str
    state: str
    seq: int
    attempt: int
    result: Any
    started_at: float
    finished_at: float | None
    wake_at: float | None = None
    event: str | None = None
    event_key: str | None = None
    timed_out: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "state": self.state, "attempt": self.attempt,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "duration_ms": (None if self.finished_at is None
                                else round(self.finished_at - self.started_at, 3)),
                "wake_at": self.wake_at, "event": self.event, "key": self.event_key,
                "timed_out": self.timed_out}


@dataclass(frozen=True, slots=True)
class StepLog:
    """Every recorded step of one job in ``seq`` order, read in ONE statement at the start of
    an attempt, and the database's now at that read. Whether a sleep is over is decided by
    ``step_sleep`` on the same clock, in the statement that acts on it, not from this reading."""

    now_ms: float
    steps: tuple[StepRecord, ...]


@dataclass(frozen=True, slots=True)
class StepResult:
    """A ``step.run`` that returned: its encoded JSON result and how long the call took."""

    name: str
    result: bytes
    attempt: int
    duration_ms: float


@dataclass(frozen=True, slots=True)
class StepSleep:
    """``step.sleep``: the first call records the wake-up time (now + ``duration_ms`` on the
    database's clock); every call completes the step once that time has come, or parks the
    job until it."""

    name: str
    duration_ms: float
    attempt: int


@dataclass(frozen=True, slots=True)
class StepWait:
    """``step.wait_for_event``: completes with the first stored event of (``event``, ``key``),
    or with nothing once ``timeout_ms`` (counted from the first call) has passed; otherwise
    parks the job until the event is sent, the timeout, or ``poll_ms`` from now."""

    name: str
    event: str
    key: str
    timeout_ms: float | None
    poll_ms: float | None
    attempt: int


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What a sleep or a wait came to: ``done`` (the step is completed: ``value`` is its result)
    or parked (the job is suspended until ``wake_at``, its attempt given back). ``fenced``:
    the run no longer owns the job; nothing was written."""

    done: bool
    value: Any = None
    wake_at: float | None = None
    timed_out: bool = False
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class NewEvent:
    name: str
    key: str
    payload: bytes        # encoded JSON, already checked and size-limited


@dataclass(frozen=True, slots=True)
class SentEvent:
    """A stored event, and how many parked waiters it woke."""

    id: int
    woken: int
