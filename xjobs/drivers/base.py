"""The JobDriver seam: the only door between the runtime and storage.

Verbs are noun-first (``job_claim``, ``job_nack_many``, ``leader_elect``). ``supervisor/`` and
``workers/`` never hold SQL; everything they need from storage is a verb of a Protocol below,
taking small frozen records (``records*.py``): one record where a verb has more than three
parameters, and a settlement is one ``Nack`` with one outcome. Every consumer names the
Protocol it uses (``JobDriver``, or the one noun it needs).

A verb exists in three places, under its own name, so ``grep job_claim`` finds all of them:

* here, the Protocol that declares it (and what it means);
* ``facade.CheckedDriver``, the one door of every driver: it refuses or normalises the
  verb's arguments once (``refusals.py``), then calls the driver's own implementation;
* one implementation per driver, a method of the same name in ``pg_<noun>.py`` and in
  ``memory_<noun>.py``; its statements are in ``queries.sql``, most under the verb's own name
  (``job_claim_one``, ``job_nack_many``), the others named where the method runs them.

Each noun is implemented by one object per driver, which subclasses the noun's Protocol, so
the type checker holds both drivers to every signature::

    noun                          Postgres          memory
    Storage (the lifecycle)       PgDatabase        MemoryTable
    JobStore (a run's hot path)   PgJobs            MemoryJobs
    Maintenance                   PgMaintenance     MemoryMaintenance
    Introspection (operators)     PgOperator        MemoryOperator
    QueueStore                    PgQueues          MemoryQueues
    LeaderStore, ScheduleStore    PgSchedule        MemorySchedule
    OutboxStore                   PgOutbox          MemoryOutbox
    SlotStore                     PgSlots           MemorySlots
    StepStore, EventStore         PgSteps           MemorySteps

``JobDriver`` is the core every driver has. ``SlotStore`` (fleet-wide job slots, for
``job(concurrency=N)``) is a declared optional capability: a consumer asks
``isinstance(driver, SlotStore)``, and a worker refuses a capped job on a driver without it
(``X_JOB_CONCURRENCY_UNENFORCEABLE``). Both shipped drivers have it. One conformance suite
runs against both drivers, so a semantic difference is a failing test. Failures of the
database itself are the driver's own errors (``errors.DriverError`` and its kinds), never the
library's.

Job states::

      enqueue ──> ready ──claim──> running ──ack──> completed
                   ^  ^               │
                   │  └──nack(retried, interrupted, shed)──┤──nack(dead)──> dead
                   │                  ├──nack(suspended)──> suspended ──due──> ready
                   └──lease lapses────┘
                      or its worker process died (released)
      cancel: ready | running | suspended ──> cancelled
      requeue: dead | cancelled ──> ready (attempt reset)

A job that was running when its worker process crashed is a SUSPECT (``crashes > 0``): the
ordinary claim skips it and only ``job_claim_alone`` hands it out, to a worker that runs it
with nothing beside it. A crash of a process running one job alone charges that job's
attempt; a crash of a process running several charges nobody and makes each a suspect. So a
job that kills its process is dead-lettered within its attempts, its neighbours never are.

Times are epoch milliseconds. "Now" is the database server's clock for a production driver and
the injected clock for one built with ``clock=`` (see ``pg_database.py``); a delay that should
not depend on the enqueuing machine's clock is sent as ``delay_ms``, not as ``run_at_ms``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import (TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping, Protocol, Sequence, TypeAlias,
                    runtime_checkable)

from ..clock import Clock
from .records import (CHARGES, COUNTED_STATES, FINISHED_STATES, LATEST_MS, LIVE_STATES, MAX_DELAY_MS, NACK_OUTCOMES,
                      STATES, Aging, Batch, Cancels, Claim, ClaimAlone, ClaimedJob, DeadGroup, Enqueued, HistoryEntry,
                      JobView, Lease, ListFilter, Matching, Nack, NackOutcome, NewJob, Progress, ProgressReport,
                      QueueControl, QueueSummary, RatePoint, Released, RunningJob, RunningPage, TenantRoom, WorkerExit)
from .records_coordination import Dispatch, LeaderView, OutboxClaim, OutboxSummary, Slot, SlotRequest, Watermark
from .records_steps import (STEP_KINDS, STEP_STATES, NewEvent, SentEvent, StepLog, StepOutcome, StepRecord,
                            StepResult, StepSleep, StepWait)

if TYPE_CHECKING:
    import psycopg

    from .memory_jobs import MemoryTransaction

# a caller's connection, whose transaction a verb's ``conn`` joins (see ``job_enqueue``)
CallerConnection: TypeAlias = "psycopg.Connection[Any] | MemoryTransaction"


class JobListener(Protocol):
    """What ``job_listen`` answers: ``fileno()`` goes into a worker's selector (``None``: nothing
    to wait on, the poll timer covers); ``poll()`` answers, without blocking, the queues that
    got new ready jobs since the last poll; ``cancels()`` the cancels it heard since the last call."""

    def fileno(self) -> int | None: ...
    def poll(self) -> set[str]: ...
    def cancels(self) -> Cancels: ...
    def close(self) -> None: ...


class Storage(Protocol):
    """The lifecycle of a driver, and its notion of now."""

    clock: Clock
    """The injected clock of a test driver; never decides a row's fate in production."""

    @property
    def server_clock(self) -> bool:
        """True: statements take now from the database server, not ``clock``."""
        ...

    def migrate(self, *, lock_timeout_ms: float = 10_000.0, upgrade: bool = True) -> list[str]:
        """Install or upgrade the schema (nothing to do on memory); idempotent. Answers the
        migrations applied (``0009_drift_and_suspect_groups``), none when the schema was current.
        ``upgrade=False`` only checks: an older schema is refused (``X_SCHEMA_OUTDATED``). A
        newer one is refused (``X_SCHEMA_TOO_NEW``) unless it still serves this code."""
        ...

    def ping(self, timeout_s: float) -> None:
        """Raise (``DatabaseUnavailable``) unless the database answers a fresh connection
        within ``timeout_s``."""
        ...

    def close(self) -> None: ...


class JobTransactions(Protocol):
    """The one capability a run's ``Ctx`` needs: ``ctx.transaction()``."""

    def job_transaction(self, lease: Lease, tenant: str | None = None, cross_tenant: bool = False,
                        result: Callable[[], bytes | None] | None = None) -> AbstractContextManager[Any]:
        """A connection in a transaction that, on a clean exit, also completes the job fenced on
        ``lease`` (with ``result()``, read then); a lost lease rolls it all back. What it yields is the
        driver's connection (a psycopg one in production), for the body's own statements,
        with ``xjobs.tenant`` (and ``xjobs.cross_tenant``) set for the transaction."""
        ...


class JobStore(JobTransactions, Protocol):
    """The hot path of one run: enqueue, claim, settle (ack, nack), renew, report.
    The settling and renewing verbs take a batch and answer the ids whose fence matched (the
    claim's token on a running job); a job missing from the answer is no longer this claim's."""

    def job_enqueue(self, jobs: Sequence[NewJob], conn: CallerConnection | None = None) -> list[Enqueued]:
        """Insert, or answer the live holder of each key (``deduped``); ``conn``: join the
        caller's transaction (a psycopg connection, or what the memory driver's
        ``job_transaction`` yields)."""
        ...

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]],
                           conn: CallerConnection | None = None) -> list[Enqueued]:
        """``job_enqueue`` of one call whose jobs arrive in chunks, all in one transaction:
        the Postgres driver sends each chunk as it arrives, so building the next one overlaps
        the insert of this one; an exception from ``chunks`` writes nothing."""
        ...

    def job_claim(self, claim: Claim) -> list[ClaimedJob]:
        """Due ready jobs, leased under one new token (see ``Claim``); crash suspects are left
        to ``job_claim_alone`` and a paused queue is claimed by nobody."""
        ...

    def job_claim_alone(self, claim: ClaimAlone) -> list[ClaimedJob]:
        """Crash suspects, to run with nothing beside them (see ``ClaimAlone``)."""
        ...

    def job_ack_many(self, leases: Sequence[Lease], results: Mapping[int, bytes] | None = None) -> set[int]:
        """Complete every job still held under its lease, in one statement; ``results``: JSON by job id."""
        ...

    def job_nack_many(self, nacks: Sequence[Nack]) -> set[int]:
        """Settle every attempt as its ``Nack`` says, in one statement; a claim appears at most
        once in a batch. A run handed back with no delay (``interrupted``) wakes its queue."""
        ...

    def job_renew_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        """Extend every held lease to ``lease_ms`` from now."""
        ...

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        """Write each run's latest ``ctx.progress()`` report, fenced like a renewal."""
        ...

    def job_listen(self, holder: str | None = None) -> JobListener:
        """A listener for new ready jobs (Postgres: LISTEN on a dedicated connection; memory:
        none, workers poll), and for cancels of ``holder``'s running jobs (Postgres: at commit)."""
        ...

    def job_ack(self, job_id: int, token: int) -> bool:
        """``job_ack_many`` of one lease: whether it was still held."""
        return job_id in self.job_ack_many([Lease(job_id, token)])

    def job_nack(self, nack: Nack) -> bool:
        """``job_nack_many`` of one settlement: whether its lease was still held."""
        return nack.job_id in self.job_nack_many([nack])

    def job_renew(self, job_id: int, token: int, lease_ms: float) -> bool:
        """``job_renew_many`` of one lease: whether it was still held."""
        return job_id in self.job_renew_many([Lease(job_id, token)], lease_ms)


class Maintenance(Protocol):
    """Upkeep of the jobs table: lapsed leases, due suspensions, dead workers, retention."""

    def job_rescue(self, limit: int = 1000) -> int:
        """Hand back lapsed leases, then wake due suspensions; each bounded by ``limit``."""
        ...

    def job_wake(self, limit: int = 1000) -> int:
        """Wake due suspensions only (a sleep that ended, a wait that timed out): back to
        ready, their queues woken. Cheap enough to run every few hundred milliseconds."""
        ...

    def job_release_worker(self, worker: WorkerExit) -> list[Released]:
        """Every job the ended worker process held goes back now (see ``WorkerExit`` and the
        statement's comment for who is charged)."""
        ...

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        """Delete finished jobs past retention (completed ones after ``completed_for_ms``,
        dead and cancelled ones after ``finished_for_ms``), oldest first, at most ``limit``."""
        ...

    def job_age(self, aging: Aging, limit: int = 1000) -> int:
        """Ready rows of ``aging.queue`` gain a level per ``step_ms`` waited; answers the rows moved."""
        ...

    def session_count(self, application_name: str) -> int:
        """Open sessions announcing ``application_name`` (a child's identity): its jobs are
        handed back only once none is left (always 0 on memory)."""
        ...


class Introspection(Protocol):
    """The operator's verbs on jobs (``xjobsd jobs``, ``admin.py``). A verb on one job answers
    the job as it is after it, or raises the one refusal that says why it did not change:
    ``JobNotFound``, ``NotCancellable``, ``NotRetryable``, ``StepNotFound``, ``DuplicateJob``
    (a live job holds its key), with one text for every driver (``refusals.py``)."""

    def job_list(self, where: ListFilter) -> list[JobView]: ...
    def job_running(self, page: RunningPage) -> list[RunningJob]: ...   # see RunningPage

    def job_get(self, job_id: int) -> JobView:
        """The job with its history and its recorded steps."""
        ...

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView: ...

    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView:
        """``reason`` is written to the job's history (who asked, and why)."""
        ...

    def step_reopen(self, job_id: int, name: str) -> JobView:
        """``retry --from-step``: forget step ``name`` and every one recorded after it, and run
        the finished job again."""
        ...

    def job_requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]:
        """One batch of a bulk retry: every picked id, with its queue when it was requeued
        (None: its key is held by a live job, so it stays as it is)."""
        ...

    def job_cancel_batch(self, batch: Batch, reason: str) -> list[int]: ...

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching: ...

    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]:
        """Dead letters grouped by queue, job name and the first ``ERROR_GROUP_WIDTH``
        characters of their error, biggest group first."""
        ...

    def job_dead(self, limit: int = 50) -> list[JobView]:   # the newest dead letters
        return self.job_list(ListFilter(state="dead", limit=limit))


class QueueStore(Protocol):
    """Queue control (fleet-wide pause) and the statistics metrics and operators read."""

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None: ...
    def queue_control(self) -> list[QueueControl]: ...
    def queue_summary(self) -> dict[str, QueueSummary]: ...
    def queue_counts(self) -> dict[str, dict[str, int]]: ...

    def queue_waiting(self) -> dict[str, dict[str, int]]:
        """Per queue and reason (``records.WAITING_REASONS``), the live jobs that wait."""

    def queue_unknown(self, names: Collection[str]) -> dict[str, int]:
        """Per queue, ready jobs whose name is not among ``names`` (no worker claims them)."""

    def job_stats(self) -> dict[str, dict[str, int]]:
        """Every job counted once, under its queue and state."""

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Add runs that ended, per queue and outcome, to the current minute (``job_rates``)."""

    def rate_series(self, since_ms: float) -> list[RatePoint]:
        """Per minute since ``since_ms`` ago (the database's clock), per queue and outcome."""

    def rate_prune(self, retention_ms: float) -> int: ...


# -- the coordination nouns ------------------------------------------------------------------------
#
# The nouns that coordinate many processes on many machines through rows: the scheduler's
# leader lease and watermarks, the transactional outbox, and fleet-wide job slots. Every
# decision about a row's fate is taken on the database's clock, in the statement that acts on it.
#
# * **leader** — ``leader_elect(election, holder, lease_ms)`` takes a free or expired lease, or
#   renews this holder's; ``leader_resign`` expires it now. Never a session advisory lock: a
#   pooled connection would carry it to whoever borrows that connection next.
# * **schedule** — ``schedule_dispatch(Dispatch)`` is ONE transaction: the leader row is locked
#   and must still be this holder's, the task's watermark moves from ``expected_ms`` to
#   ``watermark_ms`` (compare-and-set), and the occurrences' jobs are enqueued. Answers None
#   when fenced out (no longer the leader, or somebody else moved the watermark).
# * **outbox** — ``outbox_stage`` writes rows in the caller's transaction; ``outbox_claim``
#   takes a batch as a lease (token, holder, time, stamped where the rows are locked), in
#   (staged_at, id) order; ``outbox_publish`` enqueues the batch and marks it published in ONE
#   transaction, fenced on the claim's token (all or nothing: no row is ever published twice,
#   none is lost); ``outbox_release`` hands a batch back, fenced the same way. A claim older
#   than its lease is free again (its relay died mid-batch).
# * **slots** — ``slot_acquire(SlotRequest)`` grants one of ``cap`` rows keyed (job, slot), the primary key
#   the serialisation; ``slot_renew`` is fenced on the holder AND the slot not expired; release deletes it.


class LeaderStore(Protocol):
    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool: ...
    def leader_resign(self, election: str, holder: str) -> bool: ...
    def leader_get(self, election: str) -> LeaderView | None: ...


class ScheduleStore(Protocol):
    def clock_now_ms(self) -> float: ...
    def schedule_state(self) -> list[Watermark]: ...
    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None: ...


class OutboxStore(Protocol):
    def outbox_stage(self, jobs: Sequence[NewJob], conn: CallerConnection | None) -> list[int]: ...

    def outbox_listen(self) -> JobListener:
        """Wakes when rows are staged (its ``poll()`` answers a non-empty set then)."""
        ...

    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim: ...
    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None: ...
    def outbox_release(self, claim: OutboxClaim) -> int: ...
    def outbox_prune(self, retention_ms: float, limit: int) -> int: ...
    def outbox_summary(self) -> OutboxSummary: ...


@runtime_checkable
class SlotStore(Protocol):
    """Fleet-wide job slots: the optional capability ``job(concurrency=N)`` needs."""

    def slot_acquire(self, request: SlotRequest) -> int | None: ...
    def slot_renew(self, slot: Slot, lease_ms: float) -> bool: ...
    def slot_release(self, slot: Slot) -> bool: ...
    def slot_held(self) -> dict[str, int]: ...


# -- durable steps and the event bus ---------------------------------------------------------------
#
# * ``step_list(job_id)``: every step the job recorded, in the order recorded, with the
#   database's now, in ONE read (a run reads it once per attempt, at its first step).
# * ``step_put(lease, StepResult)``: a ``step.run`` that returned, written fenced on the claim;
#   False: the run no longer owns its job, nothing was written.
# * ``step_sleep`` / ``step_wait``: ONE transaction, fenced on the claim: record the step the
#   first time (its wake-up time or timeout on the database's clock), then complete it (due,
#   event found, timed out) or suspend the job (suspended until the wake-up, attempt not charged).
# * ``event_send(NewEvent, conn)``: store the event and wake the jobs suspended on its name and
#   key, in ``conn``'s transaction when given; ``event_prune`` forgets events past retention.
# ``step_reopen``, the operator's ``retry --from-step``, is one of the operator's verbs.


class StepStore(Protocol):
    def step_list(self, job_id: int) -> StepLog: ...
    def step_put(self, lease: Lease, step: StepResult) -> bool: ...
    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome: ...
    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome: ...


class EventStore(Protocol):
    def event_send(self, event: NewEvent, conn: CallerConnection | None = None) -> SentEvent: ...
    def event_prune(self, retention_ms: float, limit: int) -> int: ...


class RunStore(JobTransactions, StepStore, Protocol):
    """What one run's ``Ctx`` writes through: its transaction and its steps."""


class JobDriver(Storage, JobStore, Maintenance, Introspection, QueueStore, LeaderStore, ScheduleStore,
                OutboxStore, StepStore, EventStore, Protocol):
    """The core every driver has: the lifecycle and every noun but the optional capabilities
    (``SlotStore``)."""


__all__ = ["STATES", "LIVE_STATES", "FINISHED_STATES", "COUNTED_STATES", "CHARGES", "NACK_OUTCOMES", "MAX_DELAY_MS",
           "LATEST_MS", "Aging", "NewJob", "Enqueued", "Claim", "ClaimAlone", "ClaimedJob", "TenantRoom", "Nack",
           "NackOutcome", "Lease", "Cancels", "WorkerExit", "Batch", "JobView", "HistoryEntry", "ListFilter",
           "Matching", "Released", "QueueControl", "Progress", "ProgressReport", "QueueSummary", "RatePoint",
           "DeadGroup", "LeaderView", "Watermark", "Dispatch", "OutboxClaim", "OutboxSummary", "SlotRequest", "Slot",
           "CallerConnection", "JobListener", "Storage", "JobTransactions", "JobStore", "Maintenance",
           "Introspection", "QueueStore", "LeaderStore", "ScheduleStore", "OutboxStore", "SlotStore", "StepStore",
           "EventStore", "RunStore", "JobDriver", "STEP_KINDS", "STEP_STATES", "StepRecord", "StepLog", "StepResult",
           "StepSleep", "StepWait", "StepOutcome", "NewEvent", "SentEvent", "RunningPage", "RunningJob"]
