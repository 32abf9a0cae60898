"""The records of a job's life at the driver seam: what enqueue, claim, settlement, upkeep
and the operator's verbs take and answer, as small frozen dataclasses, and the constants of
that life (its states, the crash charges, the longest durations and latest times).

A verb with more than three parameters takes one record (``Claim``, ``ClaimAlone``,
``WorkerExit``, ``Batch``); a settlement is one record with one outcome (``Nack``). The
records of the coordination nouns are in ``records_coordination.py``, those of steps and
events in ``records_steps.py``; ``base.py`` holds the Protocols that take and answer them all.
Records have no behaviour beyond their own view of themselves, so every module can import
them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Literal, Mapping, NamedTuple, NotRequired, Sequence, TypedDict

import orjson

from ..payload import compact
from .records_steps import StepRecord

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
# a cancel notification names at most this many of its holder's jobs (a NOTIFY payload holds
# under 8,000 bytes), and only a holder of at most CANCEL_HOLDER_BYTES; past either it names
# no job (the holder checks every run) or is not sent (the holder's renewal tells it)
CANCEL_NAMED = 200
CANCEL_HOLDER_BYTES = 1000


# a named tuple: a frozen dataclass sets each field by object.__setattr__, and one call builds 100,000
class NewJob(NamedTuple):
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
        """The job as the enqueue statement's row document (and as an outbox row keeps it), the
        payload embedded as encoded; None fields are left out (the statement reads them as null)."""
        doc = {"n": self.name, "q": self.queue, "p": orjson.Fragment(self.payload), "k": self.idempotency_key,
               "pr": self.priority, "m": self.max_attempts, "d": self.delay_ms}
        for key, value in (("t", self.tenant), ("e", self.enqueued_by), ("r", self.run_at_ms),
                           ("w", self.dedupe_window_ms), ("tp", self.traceparent)):
            if value is not None:
                doc[key] = value
        return doc

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
class Claim:
    """``job_claim``: up to ``limit`` due ready jobs of ``queues``, leased to ``identity`` for
    ``lease_ms``, in (priority, run_at, id) order.

    ``names``: only jobs of these names (the ones the worker has bodies for; None: any), so a
    worker deployed without a job never takes one of it. ``caps`` (job name ->
    ``job(concurrency=N)``): a capped job whose every slot is held is left ready, and no more
    of one is claimed than it has free slots (a filter, not the grant: ``slot_acquire``
    grants). ``tenants``: what a worker's per-process tenant limits leave room for. ``caps``
    and ``tenants`` filter a claim on ONE queue (a worker's); a claim on several with either
    is refused."""

    queues: Sequence[str]
    limit: int
    lease_ms: float
    identity: str
    caps: Mapping[str, int] | None = None
    tenants: TenantRoom | None = None
    names: Collection[str] | None = None


@dataclass(frozen=True, slots=True)
class ClaimAlone:
    """``job_claim_alone``: crash suspects of ``queue`` to run with nothing beside them, the
    first in line that has waited ``waited_ms`` and the rest of its group (the half of a
    crashed process's jobs it was put in), ``limit`` in all."""

    queue: str
    lease_ms: float
    identity: str
    waited_ms: float = 0.0
    names: Collection[str] | None = None
    limit: int = 1


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


# What a nack comes to, by its outcome (the word the job's history and jobs_total record):
#
#   outcome       state       attempt      run_at                         history
#   retried       ready       charged      now + delay_ms                 written
#   dead          dead        charged      kept (finished now)            written
#   interrupted   ready       not charged  now + delay_ms                 written
#   suspended     suspended   not charged  now + delay_ms (its wake-up)   written
#   shed          ready       not charged  kept, or now + delay_ms        none
#
# A charged attempt ended on its own, so it also clears any suspicion of crashing its process.
NackOutcome = Literal["retried", "dead", "interrupted", "suspended", "shed"]
NACK_OUTCOMES: tuple[NackOutcome, ...] = ("retried", "dead", "interrupted", "suspended", "shed")
COUNTED_OUTCOMES = ("retried", "dead")    # the nacks that spend the attempt


@dataclass(frozen=True, slots=True)
class Nack:
    """How one failed or stopped attempt settles, fenced on its claim: ``outcome`` alone
    decides what becomes of the job (the table above). ``error`` lands in ``last_error``
    (None leaves it as it is) and in the history with ``traceback``; a shed and a suspension
    carry neither (they are not failures), and a dead letter no delay (it is never due)."""

    job_id: int
    token: int
    outcome: NackOutcome
    error: str | None = None
    delay_ms: float = 0.0
    traceback: str | None = None   # the failure's full traceback, for the history (bounded)

    @property
    def counts(self) -> bool:
        """Whether the attempt is charged (the job's own failure spent it)."""
        return self.outcome in COUNTED_OUTCOMES


@dataclass(frozen=True, slots=True)
class Lease:
    job_id: int
    token: int


@dataclass(frozen=True, slots=True)
class Cancels:
    """What a listener heard of cancels of its holder's running jobs since it was last asked:
    the jobs named, and whether one notification named none (check every run held)."""

    ids: frozenset[int] = frozenset()
    every: bool = False

    def __bool__(self) -> bool:
        return self.every or bool(self.ids)


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
class WorkerExit:
    """``job_release_worker``: a worker process that ended, whose running jobs go back now.
    ``crashed``: it died on its own (its supervisor did not stop it); ``how`` says how it
    ended ("killed by SIGKILL"); ``charge`` is which lone job its crash may charge
    (``CHARGES``: ``alone``, ``suspect`` or ``never``, see ``job_release_worker``)."""

    identity: str
    crashed: bool = True
    how: str = "died"
    charge: str = "alone"


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

    def as_json(self) -> ProgressReport:
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
