"""The records of a job's life at the driver seam: what enqueue, claim, settlement, upkeep
and the operator's verbs take and answer, as small frozen dataclasses, and the constants of
that life (its states, the crash charges, the longest durations and latest times).

A verb with more than three parameters takes one record (``Claim``, ``ClaimAlone``,
``WorkerExit``, ``Batch``); a settlement is one record with one outcome (``Nack``). The
records of the coordination nouns are in ``records_coordination.py``, those of steps and
events in ``records_steps.py``, what operators read in ``records_views.py`` (re-exported here); ``base.py`` holds the Protocols that take and answer them all.
Records have no behaviour beyond their own view of themselves, so every module can import
them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Literal, Mapping, NamedTuple, Sequence

import orjson

from ..payload import compact
from .records_steps import StepRecord
# what operators read (jobs ls|show, the dashboard): their own module, re-exported here
from .records_views import (
    Batch as Batch, DeadGroup as DeadGroup, HistoryEntry as HistoryEntry, JobView as JobView, KeyPlace as KeyPlace,
    ListFilter as ListFilter, Matching as Matching, ProgressReport as ProgressReport,
    QueueSummary as QueueSummary, RatePoint as RatePoint, RunningJob as RunningJob,
    RunningPage as RunningPage)

STATES = ("ready", "running", "suspended", "completed", "dead", "cancelled")
LIVE_STATES = ("ready", "running", "suspended")
FINISHED_STATES = ("completed", "dead", "cancelled")
# what metrics count every few seconds: states an index holds apart from the finished bulk
COUNTED_STATES = ("ready", "running", "suspended", "dead")
# why a live job that could otherwise run waits (queue_waiting, /metrics xjobs_queue_waiting_jobs): a
# keyed member for its key, a member of a sequence (a key of concurrency 1) for its turn, and a
# ready job due later because its rate key's window is full, it snoozed, or it was scheduled
WAITING_REASONS = ("key", "sequence", "rate", "snoozed", "scheduled")
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
    # job(concurrency_key=...): the member's key, its job's concurrency there, and whether it
    # keeps its place when it dies (an ordered job's on_failure="hold"); None: not keyed
    concurrency_key: str | None = None
    key_cap: int | None = None
    key_hold: bool = False
    fair_key: str | None = None      # job(fairness=): the key its claims are shared out by
    # job(debounce=, debounce_max=): an enqueue whose key a not-yet-started job holds moves
    # that job to now + debounce_ms, never past its creation + debounce_max_ms, with this input
    debounce_ms: float | None = None
    debounce_max_ms: float | None = None
    rate_key: str | None = None      # job(rate=...): the key its starts are counted under

    @property
    def namespace(self) -> tuple[str, str, str]:
        """The idempotency namespace: (name, tenant or '', key), as the unique index spells it."""
        return (self.name, self.tenant or "", self.idempotency_key)

    def document(self) -> dict[str, Any]:
        """The job as the enqueue statement's row document (and as an outbox row keeps it), the
        payload embedded as encoded; None fields are left out (the statement reads them as null)."""
        doc = {"n": self.name, "q": self.queue, "p": orjson.Fragment(self.payload), "k": self.idempotency_key,
               "pr": self.priority, "m": self.max_attempts, "d": self.delay_ms, "kh": self.key_hold}
        for key, value in (("t", self.tenant), ("e", self.enqueued_by), ("r", self.run_at_ms),
                           ("w", self.dedupe_window_ms), ("tp", self.traceparent), ("ck", self.concurrency_key),
                           ("kc", self.key_cap), ("fk", self.fair_key), ("rk", self.rate_key),
                           ("db", self.debounce_ms), ("dm", self.debounce_max_ms)):   # db: only a debounced job's
            if value is not None:
                doc[key] = value
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> "NewJob":
        """Back from a row document whose payload came back decoded (a jsonb column)."""
        return cls(name=doc["n"], queue=doc["q"], payload=compact(orjson.dumps(doc["p"])), idempotency_key=doc["k"],
                   tenant=doc.get("t"), enqueued_by=doc.get("e"), priority=doc.get("pr", 0),
                   max_attempts=doc.get("m", 5), run_at_ms=doc.get("r"), delay_ms=doc.get("d") or 0.0,
                   dedupe_window_ms=doc.get("w"), traceparent=doc.get("tp"), concurrency_key=doc.get("ck"),
                   key_cap=doc.get("kc"), key_hold=bool(doc.get("kh")),
                   fair_key=doc.get("fk"), debounce_ms=doc.get("db"), debounce_max_ms=doc.get("dm"),
                   rate_key=doc.get("rk"))


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    deduped: bool
    debounced: bool = False    # deduped, and the holder took this input and a later start


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
    snoozes: int = 0    # how often it put itself back for later so far (job(max_snoozes=) bounds it)
    # never claimed before this claim: no attempt of it can have recorded a step, so its run
    # skips the step read (a woken sleeper, a retry, an interrupted run: all claimed before)
    first_claim: bool = False


# What a nack comes to, by its outcome (the word the job's history and jobs_total record):
#
#   outcome       state       attempt      run_at                         history
#   retried       ready       charged      now + delay_ms                 written
#   dead          dead        charged      kept (finished now)            written
#   interrupted   ready       not charged  now + delay_ms                 written
#   suspended     suspended   not charged  now + delay_ms (its wake-up)   written
#   shed          ready       not charged  kept, or now + delay_ms        none
#   snoozed       ready       not charged  now + delay_ms; snoozes + 1    written
#
# A charged attempt ended on its own, so it also clears any suspicion of crashing its process.
NackOutcome = Literal["retried", "dead", "interrupted", "suspended", "shed", "snoozed"]
NACK_OUTCOMES: tuple[NackOutcome, ...] = ("retried", "dead", "interrupted", "suspended", "shed", "snoozed")
COUNTED_OUTCOMES = ("retried", "dead")    # the nacks that spend the attempt


@dataclass(frozen=True, slots=True)
class Nack:
    """How one failed or stopped attempt settles, fenced on its claim: ``outcome`` alone
    decides what becomes of the job (the table above). ``error`` lands in ``last_error``
    (None leaves it as it is) and in the history with ``traceback``; a shed, a suspension and
    a snooze carry neither (they are not failures), and a dead letter no delay (it is never due)."""

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
class Aging:
    """``job_age``: one queue's ready rows whose priority improves by one every ``step_ms`` they
    wait, down to ``floor``; a row already at or below ``floor`` is never touched."""

    queue: str
    step_ms: float
    floor: int

    @property
    def step_us(self) -> int:
        """The step in whole microseconds (at least one): both drivers count ages so, as a
        ``timestamptz`` holds them."""
        return max(1, round(self.step_ms * 1000.0))
