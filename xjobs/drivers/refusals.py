"""The refusals of the driver seam, each written once for every driver.

Arguments: ``CheckedDriver`` (``facade.py``) runs these checks before it calls a driver's own
implementation of a verb. Each check answers the value normalised (a duration string as
milliseconds, ``2.0`` rows as ``2``), so what an implementation receives is exactly what its
statements bind. A refused argument raises ``InvalidOption`` (or ``ClaimQueuesEmpty``) naming
the option, before anything is read or written.

Leases are different: a lease whose id or token no ``bigint`` could hold is not an error but
a lease nobody holds (``held``), exactly as a wrong token is, on every driver.

Outcomes: what an operator's verb did to one job is answered by the driver's statement as an
``Outcome``; ``cancelled``, ``requeued`` and ``reopened`` turn it into the job or the one
refusal it means, and ``lease_lost`` and ``step_kind_mismatch`` are what a body's writes
raise, so every driver raises them with one text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Collection, Mapping, NoReturn, Sequence, TypeGuard

from ..errors import (ClaimQueuesEmpty, DuplicateJob, InvalidOption, JobNotFound, LeaseLost, NotCancellable,
                      NotRetryable, StepDuplicate, StepNotFound)
from ..options import duration_ms, finite_count, finite_option, plain_name
from .records import ERROR_GROUP_WIDTH
from .base import (CHARGES, LATEST_MS, MAX_DELAY_MS, NACK_OUTCOMES, STATES, Aging, Batch, Claim, ClaimAlone, Dispatch,
                   JobView, Lease, ListFilter, Nack, NewEvent, NewJob, OutboxClaim, RunningPage, Slot, SlotRequest,
                   StepResult, StepSleep, StepWait, TenantRoom, WorkerExit)

MAX_ROWS = 100_000       # the most rows one statement claims, lists or changes


def is_bigint(value: object) -> TypeGuard[int]:
    """Whether a ``bigint`` column could hold it: a lease with any other id or token is held
    by nobody, on every driver."""
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def held(lease: Lease) -> bool:
    """Whether a fence on ``(id, lease_token)`` could match ``lease`` at all."""
    return is_bigint(lease.job_id) and is_bigint(lease.token)


def matchable(leases: Sequence[Lease]) -> list[Lease]:
    """The leases a fence could match; the others are held by nobody and answered as such."""
    return [lease for lease in leases if held(lease)]


def check_claim(claim: Claim) -> Claim:
    """A claim's queues, limit and lease, and the filters of a claim on one queue."""
    if isinstance(claim.queues, str) or not claim.queues:
        raise ClaimQueuesEmpty("claim needs a non-empty list of queue names")
    limit = finite_count(claim.limit, "claim.limit", minimum=0, maximum=MAX_ROWS)
    lease = check_lease(claim.lease_ms, "claim.lease")
    names = check_job_names(claim.names)
    caps = check_caps(claim.caps) if claim.caps else None
    room = check_tenant_room(claim.tenants) if claim.tenants is not None else None
    if (caps or room is not None) and len(claim.queues) != 1:
        raise InvalidOption("claim", "caps and tenant limits filter a claim on one queue "
                                     "(a worker's); claim each queue on its own")
    return Claim(list(claim.queues), limit, lease, claim.identity, caps, room, names)


def check_claim_alone(claim: ClaimAlone) -> ClaimAlone:
    return ClaimAlone(claim.queue, check_lease(claim.lease_ms, "claim.lease"), claim.identity,
                      duration_ms(claim.waited_ms, "claim.waited"), check_job_names(claim.names),
                      check_row_limit(claim.limit, "claim.limit"))


def check_job_names(names: Collection[str] | None) -> frozenset[str] | None:
    """The job names a claim is limited to (None: any); a bare string is refused, not split."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not all(isinstance(n, str) for n in names):
        raise InvalidOption("claim.names", "must be a sequence of job names")
    if len(names) > MAX_ROWS:
        raise InvalidOption("claim.names", f"at most {MAX_ROWS} names")
    return frozenset(names)


def check_lease(lease_ms: object, option: str) -> float:
    """A lease's length: a duration longer than zero."""
    return duration_ms(lease_ms, option, exclusive_minimum=True)


def check_new_jobs(jobs: Sequence[NewJob]) -> None:
    """The refusal for delays: a NaN or an overflowing delay would otherwise fail inside the
    database (or not at all, in memory). Payloads, keys and names were refused earlier, by
    ``enqueue.build_jobs``, the one place a ``NewJob`` is made from user input."""
    for job in jobs:
        if job.delay_ms:     # 0.0 is the common case and needs no check; NaN is truthy
            if job.run_at_ms is not None:
                raise InvalidOption("delay", "give delay_ms or run_at_ms, not both")
            finite_option(job.delay_ms, "delay", maximum=MAX_DELAY_MS)


def check_nack(nack: Nack) -> Nack:
    """One settlement: a known outcome, and only what that outcome writes. A negative delay
    is allowed (it is due at once); NaN and infinities are not."""
    if nack.outcome not in NACK_OUTCOMES:
        raise InvalidOption("nack.outcome", f"must be one of {', '.join(NACK_OUTCOMES)}, got {nack.outcome!r}")
    if nack.outcome in ("shed", "suspended", "snoozed") and (nack.error is not None or nack.traceback is not None):
        raise InvalidOption("nack.error", f"a {nack.outcome} job did not fail: it writes no error")
    if nack.outcome == "dead" and nack.delay_ms:
        raise InvalidOption("nack.delay", "a dead letter is never due again: it takes no delay")
    if nack.traceback is not None and not nack.counts:
        raise InvalidOption("nack.traceback", f"only a failed attempt has a traceback, not {nack.outcome!r}")
    for option, text in (("nack.error", nack.error), ("nack.traceback", nack.traceback)):
        if text is not None and not isinstance(text, str):
            raise InvalidOption(option, f"must be text, got {text!r}")
    return replace(nack, delay_ms=finite_option(nack.delay_ms, "nack.delay", minimum=-math.inf),
                   error=_storable(nack.error), traceback=_storable(nack.traceback))


def _storable(text: str | None) -> str | None:
    """What a failure's text column can hold: an exception's message may carry a NUL or a lone
    surrogate, which no ``text`` column (and no batch that carries it) would take."""
    if text is None or ("\x00" not in text and (text.isascii() or text.isprintable())):
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def check_nacks(nacks: Sequence[Nack]) -> list[Nack]:
    """A batch of settlements, each checked; the ones a fence could match (``held``). A claim
    settles once per batch: a second nack on one lease is refused, not left to which row a
    join picks. Two claims of one job (a stale run and the one that displaced it) may both
    be in a batch; the fence lets only the job's current one land."""
    checked = [check_nack(nack) for nack in nacks]
    seen: set[tuple[int, int]] = set()
    for nack in checked:
        if (nack.job_id, nack.token) in seen:
            raise InvalidOption("nack.job_id", f"job {nack.job_id} is settled twice on one claim in one batch")
        seen.add((nack.job_id, nack.token))
    return [nack for nack in checked if held(Lease(nack.job_id, nack.token))]


def check_worker_exit(worker: WorkerExit) -> WorkerExit:
    if worker.charge not in CHARGES:
        raise InvalidOption("charge", f"must be one of {', '.join(CHARGES)}, got {worker.charge!r}")
    return WorkerExit(worker.identity, bool(worker.crashed), worker.how, worker.charge)


def check_row_limit(limit: object, option: str = "limit") -> int:
    return finite_count(limit, option, minimum=0, maximum=MAX_ROWS)


def check_aging(aging: Aging) -> Aging:
    """A queue's aging: its name, a positive finite step, a floor a ``smallint`` holds."""
    step = duration_ms(aging.step_ms, "aging.step", exclusive_minimum=True)
    return Aging(plain_name(aging.queue, "aging.queue"), step,
                 finite_count(aging.floor, "aging.floor", minimum=-32768, maximum=32767))


def check_filter(where: ListFilter) -> ListFilter:
    """An operator filter, with its limit a whole number and its times and ages milliseconds."""
    limit = check_row_limit(where.limit)
    if where.state is not None and where.state not in STATES:
        raise InvalidOption("state", f"must be one of {', '.join(STATES)}, got {where.state!r}")
    since, until = (None if value is None else finite_option(value, option, maximum=LATEST_MS)
                    for option, value in (("since", where.since_ms), ("until", where.until_ms)))
    since_ago, until_ago = (None if value is None else duration_ms(value, option)
                            for option, value in (("since", where.since_ago_ms),
                                                  ("until", where.until_ago_ms)))
    if since is not None and since_ago is not None:
        raise InvalidOption("since", "give a time or an age, not both")
    if until is not None and until_ago is not None:
        raise InvalidOption("until", "give a time or an age, not both")
    for option, value in (("before", where.before_id), ("after", where.after_id), ("parent", where.parent_id)):
        if value is not None and not is_bigint(value):
            raise InvalidOption(option, f"must be a job id, got {value!r}")
    if where.before_id is not None and where.after_id is not None:
        raise InvalidOption("after", "page backwards (before) or forwards (after), not both")
    for option in ("queue", "name", "tenant", "error", "error_group"):
        value = getattr(where, option)
        if value is not None and (not isinstance(value, str) or "\x00" in value or len(value) > 10_000):
            raise InvalidOption(option, "must be text without NUL characters, at most 10,000 long")
    if where.error_group is not None and len(where.error_group) > ERROR_GROUP_WIDTH:
        raise InvalidOption("error_group", f"a group is the first {ERROR_GROUP_WIDTH} characters of an error")
    return replace(where, limit=limit, since_ms=since, until_ms=until, since_ago_ms=since_ago,
                   until_ago_ms=until_ago)


def check_running_page(page: RunningPage) -> RunningPage:
    """``job_running``'s page: its queue and limit as a filter's, its cursor a time and a job id."""
    checked = check_filter(ListFilter(queue=page.queue, limit=page.limit))
    before = page.before
    if before is not None:
        if not isinstance(before, tuple) or len(before) != 2 or not is_bigint(before[1]):
            raise InvalidOption("before", f"must be a start time and a job id, got {before!r}")
        before = (finite_option(before[0], "before", maximum=LATEST_MS), before[1])
    return RunningPage(checked.queue, checked.limit, before)


def check_batch(batch: Batch) -> Batch:
    """One batch of a bulk verb: a checked filter, an id range and a row limit."""
    checked = check_filter(batch.where)
    if not is_bigint(batch.after_id):
        raise InvalidOption("after", f"must be a job id, got {batch.after_id!r}")
    if not is_bigint(batch.upto_id):
        raise InvalidOption("upto", f"must be a job id, got {batch.upto_id!r}")
    return Batch(checked, batch.after_id, batch.upto_id, check_row_limit(batch.limit, "batch"))


# -- the coordination nouns ------------------------------------------------------------------------

_MAX_CAP = 1_000_000
_MAX_TRACKED_TENANTS = 1_000_000   # a limiter tracks at most that many tenants


def check_name(value: object, option: str) -> str:
    """An election, a holder identity or a job name: plain text (any printable text is data)."""
    return plain_name(value, option)


def check_cap(cap: object) -> int:
    return finite_count(cap, "slot.cap", minimum=1, maximum=_MAX_CAP)


def check_caps(caps: Mapping[str, int]) -> dict[str, int]:
    return {check_name(job, "caps.job"): check_cap(cap) for job, cap in caps.items()}


def check_tenant_room(room: TenantRoom) -> TenantRoom:
    """A worker's tenant room: names are text, numbers whole and bounded, lists bounded."""
    if not isinstance(room, TenantRoom):
        raise InvalidOption("claim.tenants", "must be TenantRoom(...)")
    ceiling = None if room.ceiling is None else finite_count(room.ceiling, "claim.tenants.ceiling",
                                                             minimum=0, maximum=_MAX_CAP)
    blocked, held = room.blocked, room.held
    if isinstance(blocked, (str, bytes)) or not all(isinstance(t, str) for t in blocked):
        raise InvalidOption("claim.tenants.blocked", "must be a sequence of tenant names")
    if not isinstance(held, Mapping) or not all(isinstance(t, str) for t in held):
        raise InvalidOption("claim.tenants.held", "must map tenant names to counts")
    if len(blocked) > _MAX_TRACKED_TENANTS or len(held) > _MAX_TRACKED_TENANTS:
        raise InvalidOption("claim.tenants", f"at most {_MAX_TRACKED_TENANTS} tenants")
    return TenantRoom(ceiling, {t: finite_count(n, "claim.tenants.held", minimum=0, maximum=_MAX_CAP)
                                for t, n in held.items()}, tuple(blocked))


def check_slot_request(request: SlotRequest) -> SlotRequest:
    return SlotRequest(check_name(request.job, "slot.job"), check_cap(request.cap),
                       check_name(request.holder, "holder"), check_lease(request.lease_ms, "slot.lease"))


def check_slot(slot: Slot) -> Slot:
    return Slot(check_name(slot.job, "slot.job"), finite_count(slot.slot, "slot", minimum=0, maximum=_MAX_CAP - 1),
                check_name(slot.holder, "holder"))


def check_dispatch(dispatch: Dispatch) -> Dispatch:
    check_name(dispatch.election, "election")
    check_name(dispatch.holder, "holder")
    check_name(dispatch.task, "task")
    for option, value in (("watermark", dispatch.watermark_ms), ("expected", dispatch.expected_ms)):
        if value is not None and not is_bigint(value):
            raise InvalidOption(option, f"must be whole epoch milliseconds, got {value!r}")
    check_new_jobs(dispatch.jobs)
    return dispatch


def check_claim_token(claim: OutboxClaim) -> OutboxClaim:
    """A publish or release without the token of a claim is refused, by every driver alike:
    the token is the fence of every outbox mutation."""
    if not is_bigint(claim.token) or (claim.ids and claim.token == 0):
        raise InvalidOption("claim.token", f"an outbox claim's token is required, got {claim.token!r}")
    if len(claim.ids) != len(claim.jobs) or not all(is_bigint(i) for i in claim.ids):
        raise InvalidOption("claim.ids", "must be the ids the claim answered, one per job")
    return claim


# -- durable steps and events ----------------------------------------------------------------------

MAX_STEP_NAME = 256
MAX_EVENT_NAME = 256
MAX_EVENT_KEY = 1024


def check_step_name(name: object) -> str:
    """A step's name: any printable text up to 256 characters (``batch:17``, ``charge card``)."""
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        raise InvalidOption("step.name", f"must be a non-empty string of at most {MAX_STEP_NAME} "
                                         f"characters, got {name!r}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidOption("step.name", f"must not contain control characters, got {name!r}")
    return name


def check_event(name: object, key: object) -> tuple[str, str]:
    """An event's name (plain text) and key (text without NUL; ``""`` is "no key")."""
    if not isinstance(name, str) or not name or len(name) > MAX_EVENT_NAME or any(
            ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidOption("event", f"must be a non-empty name of at most {MAX_EVENT_NAME} printable "
                                     f"characters, got {name!r}")
    if not isinstance(key, str) or len(key) > MAX_EVENT_KEY or "\x00" in key:
        raise InvalidOption("event.key", f"must be a string of at most {MAX_EVENT_KEY} characters "
                                         f"without NUL, got {key!r}")
    return name, key


def check_attempt(attempt: object) -> int:
    return finite_count(attempt, "step.attempt", minimum=0, maximum=2**31 - 1)


def check_step_result(step: StepResult) -> StepResult:
    check_step_name(step.name)
    check_attempt(step.attempt)
    if not isinstance(step.result, bytes):
        raise InvalidOption("step.result", "must be encoded JSON")
    return replace(step, duration_ms=duration_ms(step.duration_ms, "step.duration"))


def check_step_sleep(sleep: StepSleep) -> StepSleep:
    check_step_name(sleep.name)
    check_attempt(sleep.attempt)
    return replace(sleep, duration_ms=duration_ms(sleep.duration_ms, "step.sleep"))


def check_step_wait(wait: StepWait) -> StepWait:
    check_step_name(wait.name)
    check_attempt(wait.attempt)
    check_event(wait.event, wait.key)
    timeout = None if wait.timeout_ms is None else duration_ms(wait.timeout_ms, "wait_for_event.timeout")
    poll = None if wait.poll_ms is None else duration_ms(wait.poll_ms, "event_poll", exclusive_minimum=True)
    return replace(wait, timeout_ms=timeout, poll_ms=poll)


def check_new_event(event: NewEvent) -> NewEvent:
    check_event(event.name, event.key)
    if not isinstance(event.payload, bytes):
        raise InvalidOption("event.payload", "must be encoded JSON")
    return event


# -- what the statements answered ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an operator verb's statement did to one job: ``view`` is the job after it (None: no
    such job, or not read); ``done`` whether it changed; ``key_held``: a live job holds its
    idempotency key, so it was left as it is."""

    view: JobView | None
    done: bool
    key_held: bool = False


def job_not_found(job_id: object) -> JobNotFound:
    return JobNotFound(f"no job with id {job_id}")


def _key_held(job_id: int) -> DuplicateJob:
    return DuplicateJob(f"job {job_id}: a live job already holds its idempotency key")


def _changed(job_id: int, outcome: Outcome, refusal: type[NotCancellable | NotRetryable], rule: str) -> JobView:
    if outcome.key_held:
        raise _key_held(job_id)
    if outcome.view is None:
        raise job_not_found(job_id)
    if not outcome.done:
        raise refusal(f"job {job_id} is {outcome.view.state}; {rule}")
    return outcome.view


def cancelled(job_id: int, outcome: Outcome) -> JobView:
    """``job_cancel``'s answer: the cancelled job, or why it is not."""
    return _changed(job_id, outcome, NotCancellable, "only ready, running or suspended jobs can be cancelled")


def requeued(job_id: int, outcome: Outcome) -> JobView:
    """``job_requeue``'s answer: the job back in ready, or why it is not."""
    return _changed(job_id, outcome, NotRetryable, "only dead or cancelled jobs can be retried")


def reopened(job_id: int, name: str, outcome: Outcome, view: Callable[[], JobView]) -> JobView:
    """``step_reopen``'s answer: the job running again from step ``name``, or why it is not
    (``view`` reads the job with its steps, which tell a step never recorded from a job that
    is not finished)."""
    if outcome.key_held:
        raise _key_held(job_id)
    job = view()
    if outcome.done:
        return job
    if all(step.name != name for step in job.steps):
        raise StepNotFound(f"job {job_id} never recorded a step named {name!r}")
    raise NotRetryable(f"job {job_id} is {job.state}; only a completed, dead or cancelled "
                       "job can be retried from a step")


def step_kind_mismatch(name: str, recorded: str) -> NoReturn:
    """A step name recorded as another kind of step (the body changed between attempts)."""
    raise StepDuplicate(f"step {name!r} was recorded as {recorded}; a step name means one step")


def lease_lost(lease: Lease) -> LeaseLost:
    """What a body's transaction raises when its job is no longer held."""
    return LeaseLost(f"job {lease.job_id} is no longer held by this worker; rolled back")
