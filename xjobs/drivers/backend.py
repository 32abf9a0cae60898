"""What a driver is made of, below its checked facade: a storage layer and four collaborators.

``CheckedDriver`` (``facade.py``) refuses bad arguments once and normalises the rest, then
calls one of these. They trust what they are given: a lease's id and token are ``bigint``s,
a limit is a whole number of rows, a duration is finite milliseconds, a filter is checked,
a batch is never empty. A driver implements each Protocol with one object of its own::

    Storage       PgDatabase (pools, statements, now, notify)   MemoryTable (rows, indexes, lock)
    JobsBackend   PgJobs                                         MemoryJobs
    Maintainer    PgMaintenance                                  MemoryMaintenance
    Operator      PgOperator                                     MemoryOperator
    Queues        PgQueues                                       MemoryQueues

Outcomes that are not argument errors (no such job, not cancellable, key held) come back as
values (``Outcome``), and the facade raises them, with one text, for every driver.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from ..clock import Clock
from ..errors import LeaseLost
from .base import (ClaimedJob, Enqueued, JobListener, JobView, Lease, ListFilter, Matching,
                   Nack, NewJob, Progress, QueueControl, QueueSummary, Released)


@dataclass(frozen=True, slots=True)
class Batch:
    """One bounded batch of a bulk verb: jobs matching ``where`` with ``after_id < id <=
    upto_id``, in id order, at most ``limit`` of them."""

    where: ListFilter
    after_id: int
    upto_id: int
    limit: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an operator verb did to one job: ``view`` is the job after it (None: no such job);
    ``done`` whether it changed; ``key_held``: a live job holds its idempotency key, so it was
    left as it is."""

    view: JobView | None
    done: bool
    key_held: bool = False


def lease_lost(lease: Lease) -> LeaseLost:
    """What a body's transaction raises, on every driver, when its job is no longer held."""
    return LeaseLost(f"job {lease.job_id} is no longer held by this worker; rolled back")


class Storage(Protocol):
    """The layer every collaborator of one driver shares: where rows live, and now."""

    clock: Clock
    @property
    def server_clock(self) -> bool: ...
    def migrate(self, lock_timeout_ms: float) -> None: ...
    def ping(self, timeout_s: float) -> None: ...
    def close(self) -> None: ...


class JobsBackend(Protocol):
    def enqueue(self, jobs: Sequence[NewJob], conn: Any) -> list[Enqueued]: ...
    def claim(self, queues: Sequence[str], limit: int, lease_ms: float,
              worker_id: str) -> list[ClaimedJob]: ...
    def claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                    waited_ms: float) -> list[ClaimedJob]: ...
    def ack(self, leases: Sequence[Lease]) -> set[int]: ...
    def nack(self, nack: Nack) -> bool: ...
    def heartbeat(self, leases: Sequence[Lease], lease_ms: float) -> set[int]: ...
    def progress(self, reports: Sequence[Progress]) -> set[int]: ...

    def transaction(self, lease: Lease, held: bool) -> AbstractContextManager[Any]:
        """``held=False``: the lease cannot be matched at all (not a bigint), so the body runs
        and the transaction rolls back with ``lease_lost``."""
        ...

    def listen(self) -> JobListener: ...


class Maintainer(Protocol):
    def rescue(self, limit: int) -> int: ...
    def release_worker(self, worker_id: str, crashed: bool, how: str,
                       charge: str) -> list[Released]: ...
    def prune(self, completed_for_ms: float, finished_for_ms: float, limit: int) -> int: ...
    def session_count(self, application_name: str) -> int: ...


class Operator(Protocol):
    def find(self, where: ListFilter) -> list[JobView]: ...
    def get(self, job_id: int) -> JobView | None: ...
    def cancel(self, job_id: int, reason: str) -> Outcome: ...
    def requeue(self, job_id: int) -> Outcome: ...
    def requeue_batch(self, batch: Batch, reason: str | None) -> list[tuple[int, str | None]]: ...
    def cancel_batch(self, batch: Batch, reason: str) -> list[int]: ...
    def count(self, where: ListFilter, states: Sequence[str]) -> Matching: ...


class Queues(Protocol):
    def pause(self, queue: str, paused: bool, by: str | None) -> None: ...
    def control(self) -> list[QueueControl]: ...
    def summary(self) -> dict[str, QueueSummary]: ...
    def counts(self) -> dict[str, dict[str, int]]: ...
    def stats(self) -> dict[str, dict[str, int]]: ...
