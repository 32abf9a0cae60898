"""The refusals of the driver seam: every argument a verb takes is checked here, once.

``CheckedDriver`` (``facade.py``) runs these before it calls a driver's collaborators, so the
rules and their error texts exist once for every driver. Each check answers the value
normalised (a duration string as milliseconds, ``2.0`` rows as ``2``), so what a collaborator
receives is exactly what the statements bind. A refused argument raises ``InvalidOption`` (or
``ClaimQueuesEmpty``) naming the option, before anything is read or written.

Leases are different: a lease whose id or token no ``bigint`` could hold is not an error but
a lease nobody holds (``held``), exactly as a wrong token is, on every driver.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping, Sequence, TypeGuard

from ..errors import ClaimQueuesEmpty, InvalidOption
from ..options import duration_ms, finite_count, finite_option, plain_name
from .backend import Batch
from .records import ERROR_GROUP_WIDTH
from .base import (CHARGES, LATEST_MS, MAX_DELAY_MS, STATES, Dispatch, Lease, ListFilter, Nack, NewJob,
                   NewEvent, OutboxClaim, StepResult, StepSleep, StepWait, TenantRoom)

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


def check_claim(queues: Sequence[str], limit: object, lease_ms: object) -> tuple[list[str], int, float]:
    if isinstance(queues, str) or not queues:
        raise ClaimQueuesEmpty("claim needs a non-empty list of queue names")
    count = finite_count(limit, "claim.limit", minimum=0, maximum=MAX_ROWS)
    return list(queues), count, check_lease(lease_ms, "claim.lease")


def check_job_names(names: Sequence[str] | None) -> frozenset[str] | None:
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
    """A negative delay is allowed (it is due at once); NaN and infinities are not."""
    return replace(nack, delay_ms=finite_option(nack.delay_ms, "nack.delay", minimum=-math.inf))


def check_charge(charge: object) -> str:
    if charge not in CHARGES:
        raise InvalidOption("charge", f"must be one of {', '.join(CHARGES)}, got {charge!r}")
    return str(charge)


def check_row_limit(limit: object, option: str = "limit") -> int:
    return finite_count(limit, option, minimum=0, maximum=MAX_ROWS)


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
    for option, value in (("before", where.before_id), ("after", where.after_id)):
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


def check_batch(where: ListFilter, after_id: object, upto_id: object, limit: object) -> Batch:
    """One batch of a bulk verb: a checked filter, an id range and a row limit."""
    checked = check_filter(where)
    if not is_bigint(after_id):
        raise InvalidOption("after", f"must be a job id, got {after_id!r}")
    if not is_bigint(upto_id):
        raise InvalidOption("upto", f"must be a job id, got {upto_id!r}")
    return Batch(checked, after_id, upto_id, check_row_limit(limit, "batch"))


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


def check_slot(slot: object) -> int:
    return finite_count(slot, "slot", minimum=0, maximum=_MAX_CAP - 1)


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
