"""The JobDriver seam: the only door between the runtime and storage.

Verbs are noun-first (``job_claim``, ``job_ack``). ``supervisor/`` and ``workers/`` never hold
SQL; everything they need from storage is a method of ``JobDriver`` (below) taking small frozen
dataclasses, and every consumer names that Protocol (or the one noun it needs). It is the
union of four nouns about jobs: ``JobStore`` (the hot path of one run: enqueue, claim, settle,
renew, listen, transaction), ``Maintenance`` (rescue, hand-back of a dead worker's jobs,
prune, sessions), ``Introspection`` (the operator's verbs on jobs) and ``QueueStore`` (queue
control and statistics); four that coordinate many processes through rows: ``LeaderStore``,
``ScheduleStore``, ``OutboxStore`` and ``SlotStore`` (see below); plus the lifecycle
(``migrate``, ``ping``, ``close``). The records they pass are in ``records.py``.

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
from typing import Any, Iterable, Mapping, Protocol, Sequence

from ..clock import Clock
from .records import (STATES, LIVE_STATES, FINISHED_STATES, COUNTED_STATES, CHARGES, MAX_DELAY_MS, LATEST_MS, NewJob, Enqueued, ClaimedJob, TenantRoom, Nack, Lease, JobView, ListFilter, Matching, Released, QueueControl, Progress, QueueSummary, RatePoint, DeadGroup, LeaderView, Watermark, Dispatch, OutboxClaim, OutboxSummary, STEP_KINDS, STEP_STATES, StepRecord, StepLog, StepResult, StepSleep, StepWait, StepOutcome, NewEvent, SentEvent)

class JobListener(Protocol):
    """What ``job_listen`` answers: ``fileno()`` goes into a worker's selector (``None``: nothing
    to wait on, the poll timer covers); ``poll()`` answers, without blocking, the queues that
    got new ready jobs since the last poll."""

    def fileno(self) -> int | None: ...
    def poll(self) -> set[str]: ...
    def close(self) -> None: ...


class JobTransactions(Protocol):
    """The one capability a run's ``Ctx`` needs: ``ctx.transaction()``."""

    def job_transaction(self, lease: Lease, tenant: str | None = None,
                        cross_tenant: bool = False) -> AbstractContextManager[Any]:
        """A connection in a transaction that, on a clean exit, also completes the job fenced on
        ``lease``; a lost lease rolls it all back with ``LeaseLost``. What it yields is the
        driver's connection (a psycopg one in production), for the body's own statements,
        with ``xjobs.tenant`` (and ``xjobs.cross_tenant``) set for the transaction."""
        ...


class JobStore(JobTransactions, Protocol):
    """The hot path of one run: enqueue, claim, settle (ack, nack), renew (heartbeat), report."""

    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]:
        """Insert, or answer the live holder of each key (``deduped``); ``conn``: join the
        caller's transaction (a psycopg connection, or what the memory driver's
        ``job_transaction`` yields)."""
        ...

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]], conn: Any = None) -> list[Enqueued]:
        """``job_enqueue`` of one call whose jobs arrive in chunks, all in one transaction:
        the Postgres driver sends each chunk as it arrives, so building the next one overlaps
        the insert of this one; an exception from ``chunks`` writes nothing."""
        ...

    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float, worker_id: str,
                  caps: Mapping[str, int] | None = None,
                  tenants: TenantRoom | None = None,
                  names: Sequence[str] | None = None) -> list[ClaimedJob]:
        """``names``: claim only jobs of these names (the ones the worker has bodies for; None:
        any), so a worker deployed without a job never takes one of it.
        ``caps`` (job name -> ``job(concurrency=N)``): a capped job whose every slot is held
        is left ready, and no more of one is claimed than it has free slots (a filter, not
        the grant: ``slot_acquire`` grants). ``tenants``: what a worker's per-process tenant
        limits leave room for. Both filter a claim on ONE queue (a worker's); a claim on
        several queues with either is refused."""
        ...
    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0, names: Sequence[str] | None = None,
                        limit: int = 1) -> list[ClaimedJob]:
        """Crash suspects to run with nothing beside them: the first in line and the rest of
        its group (the half of a crashed process's jobs it was put in), ``limit`` in all."""
        ...
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

    def job_wake(self, limit: int = 1000) -> int:
        """Wake due suspensions only (a sleep that ended, a wait that timed out): back to
        ready, their queues woken. Cheap enough to run every few hundred milliseconds."""
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
    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView: ...
    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]: ...
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
    def queue_unknown(self, names: Sequence[str]) -> dict[str, int]:
        """Per queue, ready jobs whose name is not among ``names`` (no worker claims them)."""
        ...

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Add runs that ended, per queue and outcome, to the current minute (``job_rates``)."""
        ...

    def rate_series(self, since_ms: float) -> list[RatePoint]: ...
    def rate_prune(self, retention_ms: float) -> int: ...


# -- the coordination nouns ------------------------------------------------------------------------
#
# The driver nouns that coordinate many processes on many machines through rows: the
# scheduler's leader lease and watermarks, the transactional outbox, and fleet-wide job slots.
#
# Each is a small typed Protocol with noun-first verbs taking frozen dataclasses; both drivers
# implement all of them, and one conformance suite runs against both. Every decision about a
# row's fate is taken on the database's clock, in the statement that acts on it.
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
# * **slots** — ``slot_acquire(job, cap, holder, lease_ms)`` grants one of ``cap`` rows keyed
#   (job, slot): the primary key is the serialisation, nothing counts and then acts;
#   ``slot_renew`` is fenced on the holder AND on the slot not having expired; ``slot_release``
#   deletes the holder's row.


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
    def outbox_listen(self) -> JobListener:
        """Wakes when rows are staged (its ``poll()`` answers a non-empty set then)."""
        ...
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


# -- durable steps and the event bus ---------------------------------------------------------------
#
# * ``step_list(job_id)``: every step the job recorded, in the order recorded, with the
#   database's now, in ONE read (a run reads it once per attempt, at its first step).
# * ``step_put(lease, StepResult)``: a ``step.run`` that returned, written fenced on the claim;
#   False: the run no longer owns its job, nothing was written.
# * ``step_sleep`` / ``step_wait``: ONE transaction, fenced on the claim: record the step the
#   first time (its wake-up time or timeout on the database's clock), then complete it (due,
#   event found, timed out) or park the job (suspended until the wake-up, attempt given back).
# * ``step_reopen(job_id, name)``: the operator's ``retry --from-step``: forget that step and
#   every one recorded after it, and run the finished job again.
# * ``event_send(NewEvent, conn)``: store the event and wake the jobs parked on its name and
#   key, in ``conn``'s transaction when given; ``event_prune`` forgets events past retention.


class StepStore(Protocol):
    def step_list(self, job_id: int) -> StepLog: ...
    def step_put(self, lease: Lease, step: StepResult) -> bool: ...
    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome: ...
    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome: ...
    def step_reopen(self, job_id: int, name: str) -> JobView: ...


class EventStore(Protocol):
    def event_send(self, event: NewEvent, conn: Any = None) -> SentEvent: ...
    def event_prune(self, retention_ms: float, limit: int) -> int: ...


class RunStore(JobTransactions, StepStore, Protocol):
    """What one run's ``Ctx`` writes through: its transaction and its steps."""


class JobDriver(JobStore, Maintenance, Introspection, QueueStore, LeaderStore, ScheduleStore,
                OutboxStore, SlotStore, StepStore, EventStore, Protocol):
    """The whole seam, and its lifecycle: install the schema, prove the database answers, close."""

    @property
    def clock(self) -> Clock:
        """The injected clock of a test driver; never decides a row's fate in production."""
        ...

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
        """Raise unless the database answers a fresh connection within ``timeout_s``."""
        ...

    def close(self) -> None: ...


__all__ = ["STATES", "LIVE_STATES", "FINISHED_STATES", "COUNTED_STATES", "CHARGES",
           "MAX_DELAY_MS", "LATEST_MS", "NewJob", "Enqueued", "ClaimedJob", "Nack", "Lease",
           "JobView", "ListFilter", "Matching", "Released", "QueueControl", "Progress",
           "QueueSummary", "RatePoint", "DeadGroup", "LeaderView", "Watermark", "Dispatch", "OutboxClaim",
           "OutboxSummary", "JobListener", "JobTransactions", "JobStore", "Maintenance",
           "Introspection", "QueueStore", "LeaderStore", "ScheduleStore", "OutboxStore",
           "SlotStore", "StepStore", "EventStore", "RunStore", "JobDriver", "STEP_KINDS", "STEP_STATES",
           "StepRecord", "StepLog", "StepResult", "StepSleep", "StepWait", "StepOutcome", "NewEvent",
           "SentEvent"]
