"""``CheckedDriver``: the one door of every driver, where each verb's arguments are checked once.

Each verb of ``JobDriver`` (and of ``SlotStore`` and ``AsyncWrites``, ``base_async.py``) is here
under its own name, and each does the same two things: refuse or normalise its arguments
(``refusals.py``), then call the method of the same name on the driver's implementation of
that noun (``base.py`` lists them), in one line. A reader follows ``job_claim`` from here to
``PgJobs.job_claim`` or ``MemoryJobs.job_claim``, and from there to the statement of that name
in ``queries.sql``.

What is true of every driver lives here too: a claim of 0 rows, an empty batch and a lease
nobody can hold never reach an implementation, and a job id no ``bigint`` could hold is no
such job. The verbs made of others (``job_ack``, ``job_nack``, ``job_renew``,
``job_dead``) are the Protocol's own, written once in ``base.py``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

from ..clock import Clock
from ..errors import InvalidOption
from ..options import duration_ms, finite_count, finite_option
from .base import (Aging, Batch, CallerConnection, Claim, ClaimAlone, ClaimedJob, DeadGroup, Dispatch, Enqueued,
                   EventStore, Introspection, JobDriver, JobListener, JobStore, JobView, LeaderStore,
                   LeaderView, Lease, ListFilter, Maintenance, Matching, Nack, NewEvent, NewJob, OutboxClaim,
                   OutboxStore, OutboxSummary, Progress, QueueControl, QueueStore, QueueSummary, RatePoint,
                   Released, RunningJob, RunningPage, ScheduleStore, SentEvent, Slot, SlotRequest, SlotStore, StepLog, StepOutcome,
                   StepResult, StepSleep, StepStore, StepWait, Storage, Watermark, WorkerExit)
from .fair import CheckedFair, FairClaims
from .fanins import FanInStore
from .ledger import BackfillLedger, CheckedLedger
from .rate_keys import CheckedRateKeys, RateKeyStore
from .settlement import Settlement, SettlementWaits
from .base_async import AsyncCallerConnection, AsyncWrites
from .refusals import (check_aging, check_batch, check_claim, check_claim_alone, check_claim_token, check_dispatch,
                       check_filter, check_job_names, check_lease, check_name, check_nacks, check_new_event,
                       check_new_jobs, check_row_limit, check_running_page, check_slot, check_slot_request, check_step_name,
                       check_step_result, check_step_sleep, check_step_wait, check_worker_exit, held,
                       is_bigint, job_not_found, matchable)


def check_result(result: bytes | None) -> bytes | None:
    """A result is the JSON text the worker encoded (payload.encode_result), or None."""
    if result is not None and not isinstance(result, bytes):
        raise InvalidOption("result", f"must be encoded JSON (bytes) or None, got {type(result).__name__}")
    return result


def check_results(results: Mapping[int, bytes] | None) -> dict[int, bytes]:
    return {job_id: value for job_id, r in (results or {}).items() if (value := check_result(r)) is not None}


class CheckedDriver(JobDriver, SlotStore, AsyncWrites):
    """A driver: its storage and one implementation of each noun, behind the checks. One
    object may implement two nouns (the schedule and the leader, the steps and the events)."""

    def __init__(self, *, storage: Storage, jobs: JobStore, maintenance: Maintenance,
                 operator: Introspection, queues: QueueStore, leader: LeaderStore,
                 schedule: ScheduleStore, outbox: OutboxStore, slots: SlotStore, steps: StepStore,
                 events: EventStore, writes_async: AsyncWrites,
                 backfills: BackfillLedger | None = None, waits: SettlementWaits | None = None,
                 fanins: FanInStore | None = None, fair: FairClaims | None = None,
                 rate_keys: RateKeyStore | None = None) -> None:
        self._storage = storage
        self._waits = waits
        # the optional fan-ins of workflows (fanins.py): child jobs, map, batches
        self.fanins: FanInStore | None = fanins
        self.fair: FairClaims | None = None if fair is None else CheckedFair(fair)   # fair.py
        # the optional backfill ledger (ledger.py), behind its own door; None: passes run unbooked
        self.backfills: BackfillLedger | None = None if backfills is None else CheckedLedger(backfills)
        # the optional rate-key store (rate_keys.py): job(rate=...) counted across the fleet
        self.rate_keys: RateKeyStore | None = None if rate_keys is None else CheckedRateKeys(rate_keys)
        self._jobs = jobs
        self._maintenance = maintenance
        self._operator = operator
        self._queues = queues
        self._leader = leader
        self._schedule = schedule
        self._outbox = outbox
        self._slots = slots
        self._steps = steps
        self._events = events
        self._async = writes_async

    # -- Storage: the lifecycle ---------------------------------------------------------------

    @property
    def clock(self) -> Clock:
        return self._storage.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._storage.clock = clock

    @property
    def server_clock(self) -> bool:
        return self._storage.server_clock

    def migrate(self, *, lock_timeout_ms: float = 10_000.0, upgrade: bool = True) -> list[str]:
        if not isinstance(upgrade, bool):
            raise InvalidOption("migrate.upgrade", f"must be true or false, got {upgrade!r}")
        return self._storage.migrate(lock_timeout_ms=finite_option(
            lock_timeout_ms, "migrate.lock_timeout", exclusive_minimum=True), upgrade=upgrade)

    def ping(self, timeout_s: float) -> None:
        self._storage.ping(finite_option(timeout_s, "ping.timeout", maximum=3600.0, exclusive_minimum=True))

    def close(self) -> None:
        self._storage.close()

    # -- JobStore: the hot path -----------------------------------------------------------------

    def job_enqueue(self, jobs: Sequence[NewJob], conn: CallerConnection | None = None) -> list[Enqueued]:
        check_new_jobs(jobs)
        return self._jobs.job_enqueue(jobs, conn) if jobs else []

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]],
                           conn: CallerConnection | None = None) -> list[Enqueued]:
        def checked() -> Iterator[Sequence[NewJob]]:
            for chunk in chunks:
                check_new_jobs(chunk)
                yield chunk
        return self._jobs.job_enqueue_chunks(checked(), conn)

    def job_claim(self, claim: Claim) -> list[ClaimedJob]:
        claim = check_claim(claim)
        if not claim.limit or claim.names == frozenset():
            return []
        return self._jobs.job_claim(claim)

    def job_claim_alone(self, claim: ClaimAlone) -> list[ClaimedJob]:
        claim = check_claim_alone(claim)
        if not claim.limit or claim.names == frozenset():
            return []
        return self._jobs.job_claim_alone(claim)

    def job_ack_many(self, leases: Sequence[Lease], results: Mapping[int, bytes] | None = None) -> set[int]:
        leases = matchable(leases)
        return self._jobs.job_ack_many(leases, check_results(results)) if leases else set()

    def job_nack_many(self, nacks: Sequence[Nack]) -> set[int]:
        nacks = check_nacks(nacks)
        return self._jobs.job_nack_many(nacks) if nacks else set()

    def job_renew_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        lease = check_lease(lease_ms, "renew.lease")
        leases = matchable(leases)
        return self._jobs.job_renew_many(leases, lease) if leases else set()

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        reports = [report for report in reports if held(report.lease)]
        return self._jobs.job_progress_many(reports) if reports else set()

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease, tenant: str | None = None, cross_tenant: bool = False,
                        result: Callable[[], bytes | None] | None = None) -> Iterator[Any]:
        if tenant is not None and (not isinstance(tenant, str) or "\x00" in tenant):
            raise InvalidOption("tenant", "must be a string without NUL characters")
        checked = None if result is None else (lambda: check_result(result()))
        with self._jobs.job_transaction(lease, tenant, bool(cross_tenant), checked) as conn:
            yield conn

    def job_listen(self, holder: str | None = None) -> JobListener:
        return self._jobs.job_listen(holder)

    # -- Maintenance ------------------------------------------------------------------------------

    def job_rescue(self, limit: int = 1000) -> int:
        return self._maintenance.job_rescue(check_row_limit(limit, "rescue.limit"))

    def job_wake(self, limit: int = 1000) -> int:
        return self._maintenance.job_wake(check_row_limit(limit, "wake.limit"))

    def job_release_worker(self, worker: WorkerExit) -> list[Released]:
        return self._maintenance.job_release_worker(check_worker_exit(worker))

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        limit = check_row_limit(limit, "prune.limit")
        completed_for = duration_ms(completed_for_ms, "prune.completed_for")
        finished_for = duration_ms(finished_for_ms, "prune.finished_for")
        return self._maintenance.job_prune(completed_for, finished_for, limit)

    def job_age(self, aging: Aging, limit: int = 1000) -> int:
        return self._maintenance.job_age(check_aging(aging), check_row_limit(limit, "aging.limit"))

    def session_count(self, application_name: str) -> int:
        return self._maintenance.session_count(application_name)

    # -- Introspection: the operator's verbs --------------------------------------------------------

    def job_list(self, where: ListFilter) -> list[JobView]:
        return self._operator.job_list(check_filter(where))

    def job_running(self, page: RunningPage) -> list[RunningJob]:
        return self._operator.job_running(check_running_page(page))

    def job_get(self, job_id: int) -> JobView:
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return self._operator.job_get(job_id)

    def job_await(self, job_id: int, timeout_s: float | None = None) -> Settlement:
        """The job once it settled, or as it is when ``timeout_s`` ran out (settlement.py)."""
        return self._waits_for(job_id, timeout_s).job_await(job_id, timeout_s)

    async def job_await_async(self, job_id: int, timeout_s: float | None = None) -> Settlement:
        return await self._waits_for(job_id, timeout_s).job_await_async(job_id, timeout_s)

    def _waits_for(self, job_id: int, timeout_s: float | None) -> SettlementWaits:
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        if timeout_s is not None:
            finite_option(timeout_s, "timeout")
        if self._waits is None:
            raise InvalidOption("driver", f"{type(self).__name__} cannot wait for a job's result")
        return self._waits

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return self._operator.job_cancel(job_id, reason or "cancelled")

    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView:
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return self._operator.job_requeue(job_id, reason)

    def step_reopen(self, job_id: int, name: str) -> JobView:
        name = check_step_name(name)
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return self._operator.step_reopen(job_id, name)

    def job_requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]:
        return self._operator.job_requeue_batch(check_batch(batch), reason)

    def job_cancel_batch(self, batch: Batch, reason: str) -> list[int]:
        return self._operator.job_cancel_batch(check_batch(batch), reason)

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        return self._operator.job_count(check_filter(where), list(states))

    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]:
        return self._operator.job_dead_groups(check_row_limit(limit))

    # -- QueueStore -------------------------------------------------------------------------------

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None:
        self._queues.queue_pause(queue, bool(paused), by)

    def queue_control(self) -> list[QueueControl]:
        return self._queues.queue_control()

    def queue_summary(self) -> dict[str, QueueSummary]:
        return self._queues.queue_summary()

    def queue_counts(self) -> dict[str, dict[str, int]]:
        return self._queues.queue_counts()

    def queue_waiting(self) -> dict[str, dict[str, int]]:
        return self._queues.queue_waiting()

    def queue_unknown(self, names: Collection[str]) -> dict[str, int]:
        known = check_job_names(names)
        return self._queues.queue_unknown(known if known is not None else frozenset())

    def job_stats(self) -> dict[str, dict[str, int]]:
        return self._queues.job_stats()

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        checked = {check_name(queue, "queue"): {check_name(outcome, "outcome"):
                                                  finite_count(n, "count", minimum=0)
                                                  for outcome, n in per.items() if n}
                   for queue, per in counts.items()}
        checked = {queue: per for queue, per in checked.items() if per}
        if checked:
            self._queues.rate_add(checked)

    def rate_series(self, since_ms: float) -> list[RatePoint]:
        return self._queues.rate_series(duration_ms(since_ms, "since"))

    def rate_prune(self, retention_ms: float) -> int:
        return self._queues.rate_prune(duration_ms(retention_ms, "retention"))

    # -- LeaderStore and ScheduleStore ------------------------------------------------------------

    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool:
        return self._leader.leader_elect(check_name(election, "election"), check_name(holder, "holder"),
                                         check_lease(lease_ms, "leader.lease"))

    def leader_resign(self, election: str, holder: str) -> bool:
        return self._leader.leader_resign(check_name(election, "election"), check_name(holder, "holder"))

    def leader_get(self, election: str) -> LeaderView | None:
        return self._leader.leader_get(check_name(election, "election"))

    def clock_now_ms(self) -> float:
        return self._schedule.clock_now_ms()

    def schedule_state(self) -> list[Watermark]:
        return self._schedule.schedule_state()

    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None:
        return self._schedule.schedule_dispatch(check_dispatch(dispatch))

    # -- OutboxStore ----------------------------------------------------------------------------

    def outbox_stage(self, jobs: Sequence[NewJob], conn: CallerConnection | None) -> list[int]:
        check_new_jobs(jobs)
        return self._outbox.outbox_stage(jobs, conn) if jobs else []

    def outbox_listen(self) -> JobListener:
        return self._outbox.outbox_listen()

    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim:
        holder = check_name(holder, "holder")
        limit = check_row_limit(limit, "outbox.limit")
        lease = check_lease(lease_ms, "outbox.lease")
        return self._outbox.outbox_claim(holder, limit, lease) if limit else OutboxClaim(0, holder, (), ())

    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None:
        claim = check_claim_token(claim)
        return self._outbox.outbox_publish(claim) if claim.ids else []

    def outbox_release(self, claim: OutboxClaim) -> int:
        claim = check_claim_token(claim)
        return self._outbox.outbox_release(claim) if claim.ids else 0

    def outbox_prune(self, retention_ms: float, limit: int) -> int:
        return self._outbox.outbox_prune(duration_ms(retention_ms, "outbox.retention"),
                                         check_row_limit(limit, "outbox.prune.limit"))

    def outbox_summary(self) -> OutboxSummary:
        return self._outbox.outbox_summary()

    # -- SlotStore --------------------------------------------------------------------------------

    def slot_acquire(self, request: SlotRequest) -> int | None:
        return self._slots.slot_acquire(check_slot_request(request))

    def slot_renew(self, slot: Slot, lease_ms: float) -> bool:
        return self._slots.slot_renew(check_slot(slot), check_lease(lease_ms, "slot.lease"))

    def slot_release(self, slot: Slot) -> bool:
        return self._slots.slot_release(check_slot(slot))

    def slot_held(self) -> dict[str, int]:
        return self._slots.slot_held()

    # -- StepStore and EventStore -------------------------------------------------------------------

    def step_list(self, job_id: int) -> StepLog:
        if not is_bigint(job_id):
            return StepLog(self._schedule.clock_now_ms(), ())
        return self._steps.step_list(job_id)

    def step_put(self, lease: Lease, step: StepResult) -> bool:
        step = check_step_result(step)
        return held(lease) and self._steps.step_put(lease, step)

    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome:
        sleep = check_step_sleep(sleep)
        return self._steps.step_sleep(lease, sleep) if held(lease) else StepOutcome(False, fenced=True)

    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome:
        wait = check_step_wait(wait)
        return self._steps.step_wait(lease, wait) if held(lease) else StepOutcome(False, fenced=True)

    def event_send(self, event: NewEvent, conn: CallerConnection | None = None) -> SentEvent:
        return self._events.event_send(check_new_event(event), conn)

    def event_prune(self, retention_ms: float, limit: int) -> int:
        return self._events.event_prune(duration_ms(retention_ms, "event_retention"),
                                        check_row_limit(limit, "events.prune.limit"))

    # -- AsyncWrites: awaited on the application's AsyncConnection ------------------------------------

    async def job_enqueue_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[Enqueued]:
        check_new_jobs(jobs)
        return await self._async.job_enqueue_async(jobs, conn) if jobs else []

    async def outbox_stage_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[int]:
        check_new_jobs(jobs)
        return await self._async.outbox_stage_async(jobs, conn) if jobs else []

    async def event_send_async(self, event: NewEvent, conn: AsyncCallerConnection) -> SentEvent:
        return await self._async.event_send_async(check_new_event(event), conn)
