"""``CheckedDriver``: the one door of every driver, where arguments are checked once.

Each public verb of ``JobDriver`` is here, and each does the same two things: refuse or
normalise its arguments (``refusals.py``), then hand them to the collaborator that does the
work (``backend.py``), in one line. A driver is this class plus the objects it is built
with, so a reader follows ``job_claim`` to ``self._jobs.claim`` and from there into one file
of one driver (``pg_jobs.py`` or ``memory_jobs.py``)::

    CheckedDriver ─┬─ _jobs         the hot path: enqueue, claim, ack, nack, heartbeat, progress
                   ├─ _maintenance  rescue, release a dead worker's jobs, prune, sessions
                   ├─ _operator     list, get, cancel, requeue (one and in batches), count
                   ├─ _queues       pause, control, summary, counts, stats
                   └─ _storage      the layer they share: connections or the table, and now

What is true of every driver lives here too: a claim of 0 rows, an empty batch and a lease
nobody can hold never reach a collaborator, and the operator's refusals (no such job, not
cancellable, key held) are raised here from what the collaborator answers, with one text.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from ..clock import Clock
from ..errors import (DuplicateJob, InvalidOption, JobNotFound, NotCancellable, NotRetryable, StepNotFound,
                      XJobsError)
from ..options import duration_ms, finite_count, finite_option
from .backend import (JobsBackend, Maintainer, Operator, Outbox, Outcome, Queues, Schedule, Slots,
                      Steps, Storage)
from .base import (ClaimedJob, Dispatch, Enqueued, JobListener, JobView, LeaderView, Lease,
                   ListFilter, Matching, Nack, NewJob, OutboxClaim, OutboxSummary, Progress,
                   QueueControl, QueueSummary, RatePoint, DeadGroup, Released, SentEvent, StepLog, StepOutcome, StepResult,
                   StepSleep, StepWait, TenantRoom, Watermark, NewEvent)
from .refusals import (check_batch, check_cap, check_caps, check_tenant_room, check_charge, check_claim,
                       check_claim_token, check_dispatch, check_filter, check_lease, check_nack,
                       check_job_names, check_name, check_new_event, check_new_jobs, check_row_limit, check_slot,
                       check_step_name, check_step_result, check_step_sleep, check_step_wait, held, is_bigint,
                       matchable)

if TYPE_CHECKING:
    from .base import JobDriver


class CheckedDriver:
    def __init__(self, *, storage: Storage, jobs: JobsBackend, maintenance: Maintainer,
                 operator: Operator, queues: Queues, schedule: Schedule, outbox: Outbox,
                 slots: Slots, steps: Steps) -> None:
        self._storage = storage
        self._jobs = jobs
        self._maintenance = maintenance
        self._operator = operator
        self._queues = queues
        self._schedule = schedule
        self._outbox = outbox
        self._slots = slots
        self._steps = steps

    # -- lifecycle ----------------------------------------------------------------------------

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
        return self._storage.migrate(finite_option(lock_timeout_ms, "migrate.lock_timeout", exclusive_minimum=True),
                                     upgrade)

    def ping(self, timeout_s: float) -> None:
        self._storage.ping(finite_option(timeout_s, "ping.timeout", maximum=3600.0, exclusive_minimum=True))

    def close(self) -> None:
        self._storage.close()

    # -- JobStore: the hot path -----------------------------------------------------------------

    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]:
        check_new_jobs(jobs)
        return self._jobs.enqueue(jobs, conn) if jobs else []

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]], conn: Any = None) -> list[Enqueued]:
        """One call's jobs, arriving in chunks (built while earlier ones are inserted), in one
        transaction; answers in input order, as ``job_enqueue``."""
        def checked() -> Iterator[Sequence[NewJob]]:
            for chunk in chunks:
                check_new_jobs(chunk)
                yield chunk
        return self._jobs.enqueue_chunks(checked(), conn)

    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float, worker_id: str,
                  caps: Mapping[str, int] | None = None,
                  tenants: TenantRoom | None = None,
                  names: Sequence[str] | None = None) -> list[ClaimedJob]:
        queue_names, count, lease = check_claim(queues, limit, lease_ms)
        only = check_job_names(names)
        capped = check_caps(caps) if caps else {}
        room = check_tenant_room(tenants) if tenants is not None else None
        if (capped or room is not None) and len(queue_names) != 1:
            raise InvalidOption("claim", "caps and tenant limits filter a claim on one queue "
                                         "(a worker's); claim each queue on its own")
        if not count or only == frozenset():
            return []
        return self._jobs.claim(queue_names, count, lease, worker_id, capped, room, only)

    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0, names: Sequence[str] | None = None,
                        limit: int = 1) -> list[ClaimedJob]:
        lease, waited = check_lease(lease_ms, "claim.lease"), duration_ms(waited_ms, "claim.waited")
        count = check_row_limit(limit, "claim.limit")
        only = check_job_names(names)
        if not count or only == frozenset():
            return []
        return self._jobs.claim_alone(queue, lease, worker_id, waited, only, count)

    def job_ack_many(self, leases: Sequence[Lease]) -> set[int]:
        leases = matchable(leases)
        return self._jobs.ack(leases) if leases else set()

    def job_ack(self, job_id: int, token: int) -> bool:
        return job_id in self.job_ack_many([Lease(job_id, token)])

    def job_nack(self, nack: Nack) -> bool:
        nack = check_nack(nack)
        return held(Lease(nack.job_id, nack.token)) and self._jobs.nack(nack)

    def job_heartbeat_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        lease = check_lease(lease_ms, "heartbeat.lease")
        leases = matchable(leases)
        return self._jobs.heartbeat(leases, lease) if leases else set()

    def job_heartbeat(self, job_id: int, token: int, lease_ms: float) -> bool:
        return job_id in self.job_heartbeat_many([Lease(job_id, token)], lease_ms)

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        reports = [report for report in reports if held(report.lease)]
        return self._jobs.progress(reports) if reports else set()

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease, tenant: str | None = None,
                        cross_tenant: bool = False) -> Iterator[Any]:
        if tenant is not None and (not isinstance(tenant, str) or "\x00" in tenant):
            raise InvalidOption("tenant", "must be a string without NUL characters")
        with self._jobs.transaction(lease, held(lease), tenant, bool(cross_tenant)) as conn:
            yield conn

    def job_listen(self) -> JobListener:
        return self._jobs.listen()

    # -- Maintenance ------------------------------------------------------------------------------

    def job_rescue(self, limit: int = 1000) -> int:
        return self._maintenance.rescue(check_row_limit(limit, "rescue.limit"))

    def job_wake(self, limit: int = 1000) -> int:
        return self._maintenance.wake(check_row_limit(limit, "wake.limit"))

    def job_release_worker(self, worker_id: str, *, crashed: bool = True, how: str = "died",
                           charge: str = "alone") -> list[Released]:
        return self._maintenance.release_worker(worker_id, bool(crashed), how, check_charge(charge))

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        limit = check_row_limit(limit, "prune.limit")
        completed_for = duration_ms(completed_for_ms, "prune.completed_for")
        finished_for = duration_ms(finished_for_ms, "prune.finished_for")
        return self._maintenance.prune(completed_for, finished_for, limit)

    def session_count(self, application_name: str) -> int:
        return self._maintenance.session_count(application_name)

    # -- Introspection: the operator's verbs --------------------------------------------------------

    def job_list(self, where: ListFilter) -> list[JobView]:
        return self._operator.find(check_filter(where))

    def job_get(self, job_id: int) -> JobView:
        view = self._operator.get(job_id)
        if view is None:
            raise JobNotFound(f"no job with id {job_id}")
        return replace(view, steps=self._steps.list(job_id, for_run=False).steps)

    def job_dead(self, limit: int = 50) -> list[JobView]:
        return self.job_list(ListFilter(state="dead", limit=limit))

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        outcome = self._operator.cancel(job_id, reason or "cancelled")
        return _settled(job_id, outcome, NotCancellable, "only ready, running or suspended jobs can be cancelled")

    def job_requeue(self, job_id: int, reason: str | None = None) -> JobView:
        """``reason`` is written to the job's history (who asked, and why)."""
        outcome = self._operator.requeue(job_id, reason)
        return _settled(job_id, outcome, NotRetryable, "only dead or cancelled jobs can be retried")

    def job_requeue_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                          reason: str | None) -> list[tuple[int, str | None]]:
        """One batch of a bulk retry: every picked id, with its queue when it was requeued
        (None: its key is held by a live job, so it stays as it is)."""
        return self._operator.requeue_batch(check_batch(where, after_id, upto_id, limit), reason)

    def job_cancel_batch(self, where: ListFilter, after_id: int, upto_id: int, limit: int,
                         reason: str) -> list[int]:
        return self._operator.cancel_batch(check_batch(where, after_id, upto_id, limit), reason)

    def job_count(self, where: ListFilter, states: Sequence[str]) -> Matching:
        return self._operator.count(check_filter(where), list(states))

    def job_stats(self) -> dict[str, dict[str, int]]:
        return self._queues.stats()

    def job_dead_groups(self, limit: int = 50) -> list[DeadGroup]:
        """Dead letters grouped by queue, job name and the first ``ERROR_GROUP_WIDTH``
        characters of their error, biggest group first."""
        return self._operator.dead_groups(check_row_limit(limit))

    # -- QueueStore -------------------------------------------------------------------------------

    def queue_pause(self, queue: str, paused: bool, by: str | None = None) -> None:
        self._queues.pause(queue, bool(paused), by)

    def queue_control(self) -> list[QueueControl]:
        return self._queues.control()

    def queue_summary(self) -> dict[str, QueueSummary]:
        return self._queues.summary()

    def queue_counts(self) -> dict[str, dict[str, int]]:
        return self._queues.counts()

    def rate_add(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Add a worker's outcome counts since its last report to the current minute."""
        checked = {check_name(queue, "queue"): {check_name(outcome, "outcome"):
                                                  finite_count(n, "count", minimum=0)
                                                  for outcome, n in per.items() if n}
                   for queue, per in counts.items()}
        checked = {queue: per for queue, per in checked.items() if per}
        if checked:
            self._queues.rate_add(checked)

    def rate_series(self, since_ms: float) -> list[RatePoint]:
        """Per minute since ``since_ms`` ago (the database's clock), per queue and outcome."""
        return self._queues.rate_series(duration_ms(since_ms, "since"))

    def rate_prune(self, retention_ms: float) -> int:
        return self._queues.rate_prune(duration_ms(retention_ms, "retention"))

    def queue_unknown(self, names: Sequence[str]) -> dict[str, int]:
        known = check_job_names(names)
        return self._queues.unknown(known if known is not None else frozenset())

    # -- LeaderStore and ScheduleStore ------------------------------------------------------------

    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool:
        return self._schedule.elect(check_name(election, "election"), check_name(holder, "holder"),
                                    check_lease(lease_ms, "leader.lease"))

    def leader_resign(self, election: str, holder: str) -> bool:
        return self._schedule.resign(check_name(election, "election"), check_name(holder, "holder"))

    def leader_get(self, election: str) -> LeaderView | None:
        return self._schedule.leader(check_name(election, "election"))

    def clock_now_ms(self) -> float:
        return self._schedule.now()

    def schedule_state(self) -> list[Watermark]:
        return self._schedule.state()

    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None:
        return self._schedule.dispatch(check_dispatch(dispatch))

    # -- OutboxStore ----------------------------------------------------------------------------

    def outbox_stage(self, jobs: Sequence[NewJob], conn: Any) -> list[int]:
        check_new_jobs(jobs)
        return self._outbox.stage(jobs, conn) if jobs else []

    def outbox_listen(self) -> JobListener:
        return self._outbox.listen()

    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim:
        holder = check_name(holder, "holder")
        limit = check_row_limit(limit, "outbox.limit")
        lease = check_lease(lease_ms, "outbox.lease")
        return self._outbox.claim(holder, limit, lease) if limit else OutboxClaim(0, holder, (), ())

    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None:
        claim = check_claim_token(claim)
        return self._outbox.publish(claim) if claim.ids else []

    def outbox_release(self, claim: OutboxClaim) -> int:
        claim = check_claim_token(claim)
        return self._outbox.release(claim) if claim.ids else 0

    def outbox_prune(self, retention_ms: float, limit: int) -> int:
        return self._outbox.prune(duration_ms(retention_ms, "outbox.retention"),
                                  check_row_limit(limit, "outbox.prune.limit"))

    def outbox_summary(self) -> OutboxSummary:
        return self._outbox.summary()

    # -- SlotStore --------------------------------------------------------------------------------

    def slot_acquire(self, job: str, cap: int, holder: str, lease_ms: float) -> int | None:
        return self._slots.acquire(check_name(job, "slot.job"), check_cap(cap),
                                   check_name(holder, "holder"), check_lease(lease_ms, "slot.lease"))

    def slot_renew(self, job: str, slot: int, holder: str, lease_ms: float) -> bool:
        return self._slots.renew(check_name(job, "slot.job"), check_slot(slot),
                                 check_name(holder, "holder"), check_lease(lease_ms, "slot.lease"))

    def slot_release(self, job: str, slot: int, holder: str) -> bool:
        return self._slots.release(check_name(job, "slot.job"), check_slot(slot), check_name(holder, "holder"))

    def slot_held(self) -> dict[str, int]:
        return self._slots.held()

    # -- StepStore and EventStore -------------------------------------------------------------------

    def step_list(self, job_id: int) -> StepLog:
        return self._steps.list(job_id) if is_bigint(job_id) else StepLog(self._schedule.now(), ())

    def step_put(self, lease: Lease, step: StepResult) -> bool:
        step = check_step_result(step)
        return held(lease) and self._steps.put(lease, step)

    def step_sleep(self, lease: Lease, sleep: StepSleep) -> StepOutcome:
        sleep = check_step_sleep(sleep)
        return self._steps.sleep(lease, sleep) if held(lease) else StepOutcome(False, fenced=True)

    def step_wait(self, lease: Lease, wait: StepWait) -> StepOutcome:
        wait = check_step_wait(wait)
        return self._steps.wait(lease, wait) if held(lease) else StepOutcome(False, fenced=True)

    def step_reopen(self, job_id: int, name: str) -> JobView:
        name = check_step_name(name)
        done = self._steps.reopen(job_id, name) if is_bigint(job_id) else None
        if done is not None and done.key_held:
            raise DuplicateJob(f"job {job_id}: a live job already holds its idempotency key")
        view = self.job_get(job_id)
        if done is not None and done.done:
            return view
        # not reopened: the job's steps, as job_get read them, tell which refusal it is
        if done is None or all(step.name != name for step in view.steps):
            raise StepNotFound(f"job {job_id} never recorded a step named {name!r}")
        raise NotRetryable(f"job {job_id} is {view.state}; only a completed, dead or cancelled "
                           "job can be retried from a step")

    def event_send(self, event: NewEvent, conn: Any = None) -> SentEvent:
        return self._steps.send(check_new_event(event), conn)

    def event_prune(self, retention_ms: float, limit: int) -> int:
        return self._steps.prune(duration_ms(retention_ms, "event_retention"),
                                 check_row_limit(limit, "events.prune.limit"))


def _settled(job_id: int, outcome: Outcome, refusal: type[XJobsError], rule: str) -> JobView:
    """The job an operator verb changed, or the one refusal that says why it did not."""
    if outcome.key_held:
        raise DuplicateJob(f"job {job_id}: a live job already holds its idempotency key")
    if outcome.view is None:
        raise JobNotFound(f"no job with id {job_id}")
    if not outcome.done:
        raise refusal(f"job {job_id} is {outcome.view.state}; {rule}")
    return outcome.view


if TYPE_CHECKING:
    def _complete(driver: CheckedDriver) -> JobDriver:
        return driver      # the type checker proves every checked driver is a whole JobDriver
