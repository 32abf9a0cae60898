"""An in-memory driver: a copy of the semantics of ``queries.sql``, one statement at a time.

Each method says which statement it mirrors. The conformance suite runs the same tests
against this driver and ``PostgresDriver``, so any drift from the SQL is a failing test, not
a convenience. What the SQL gets from the database, this module spells out:

- ids come from one counter that every *attempted* insert row consumes, deduplicated or not,
  as an identity column does under ``on conflict do nothing``;
- ``_live`` is the partial unique index ``jobs_idempotency_idx``: (name, tenant or '', key)
  over ready, running and suspended rows, kept in step by ``_move``;
- times are rounded to microseconds, as ``to_timestamp`` stores them, and a duration is
  added as whole microseconds, as ``ms * interval '1 millisecond'`` is;
- its clock is always now: the injected clock plays the part of the server's;
- payloads are stored as a ``jsonb`` column gives them back (``jsonb.py``: ``1e16`` becomes
  an int, keys are reordered) and decoded on every read, so each caller gets a fresh copy.

One lock serialises every verb, which stands in for the row locks and ``skip locked``.
There is no ``job_listen``: a worker on this driver finds new jobs by its poll timer.
``job_transaction`` cannot offer atomicity with a database; jobs enqueued through the object
it yields are visible at once and deleted again if the transaction rolls back.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import orjson

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import (DuplicateJob, InvalidOption, JobNotFound, LeaseLost, NotCancellable,
                      NotRetryable)
from ..options import duration_ms, finite_option
from .base import (COUNTED_STATES, LIVE_STATES, ClaimedJob, Enqueued, JobView, Lease, ListFilter, Nack, NewJob,
                   QueueSummary, check_claim, check_new_jobs, check_row_limit, is_bigint)
from .jsonb import as_stored
from .memory_table import Row, plus, ts
from .sql import check_schema_name


@dataclass
class MemoryTransaction:
    """What ``MemoryDriver.job_transaction`` yields; pass it as ``conn=`` to enqueue inside it."""

    driver: "MemoryDriver"
    lease: Lease
    inserted: list[int] = field(default_factory=list)


class MemoryDriver:
    server_clock = False   # no server: the injected clock is now in every verb

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, schema: str = "xjobs") -> None:
        self.clock = clock
        self.schema = check_schema_name(schema)
        self._lock = threading.Lock()
        self._jobs: dict[int, Row] = {}            # in id order, like the identity column
        self._history: dict[int, list[tuple[float, int, str, str | None]]] = {}
        self._live: dict[tuple[str, str, str], int] = {}
        self._next_id = 1

    def close(self) -> None:
        pass

    def migrate(self, *, lock_timeout_ms: float = 10_000.0) -> None:
        pass

    # -- helpers standing in for the table, its index and the fences ---------------------

    def _now(self) -> float:
        """``{now}``: the clock's reading as a ``timestamptz`` holds it."""
        return ts(self.clock.now_ms())

    def _move(self, row: Row, state: str) -> None:
        """Change a row's state, keeping the live-namespace index in step."""
        was_live, live = row.state in LIVE_STATES, state in LIVE_STATES
        if was_live and not live:
            self._live.pop(row.namespace, None)
        elif live and not was_live:
            holder = self._live.get(row.namespace)
            if holder is not None and holder != row.id:
                raise DuplicateJob(f"job {row.id}: a live job already holds its idempotency key")
            self._live[row.namespace] = row.id
        row.state = state

    def _held(self, job_id: int, token: object) -> Row | None:
        """The fence of every settling verb: ``state = 'running'`` and the claim's token."""
        if not (is_bigint(job_id) and is_bigint(token)):
            return None
        row = self._jobs.get(job_id)
        if row is None or row.state != "running" or row.lease_token != token:
            return None
        return row

    def _record(self, job_id: int, at: float, attempt: int, outcome: str, error: str | None) -> None:
        self._history.setdefault(job_id, []).append((at, attempt, outcome, error))

    def _complete(self, row: Row, at: float) -> None:
        self._move(row, "completed")
        row.finished_at, row.lease_token, row.lease_expires_at = at, None, None

    def _fail_over(self, row: Row, at: float, last: str, again: str,
                   given_back: str | None = None) -> None:
        """``job_rescue_lapsed`` / ``job_release_worker``: back to ready, or dead on the last
        attempt, and the lapsed attempt written to the history. With ``given_back`` (a
        release that does not count) the attempt is returned and the job never dies."""
        ran = row.attempt
        dead = given_back is None and row.attempt >= row.max_attempts
        self._move(row, "dead" if dead else "ready")
        row.run_at, row.finished_at = at, (at if dead else None)
        if given_back is not None:
            row.attempt = max(row.attempt - 1, 0)
            row.last_error = given_back
        else:
            row.last_error = last if dead else again
        row.lease_token = row.lease_expires_at = None
        outcome = "dead" if dead else ("interrupted" if given_back is not None else "lapsed")
        self._record(row.id, at, ran, outcome, row.last_error)

    def _view(self, row: Row, *, full: bool = False) -> JobView:
        history: tuple[dict, ...] = ()
        if full:
            entries = sorted(enumerate(self._history.get(row.id, ())), key=lambda e: (e[1][0], e[0]))
            history = tuple({"at": at, "attempt": attempt, "outcome": outcome, "error": error}
                            for _, (at, attempt, outcome, error) in entries)
        return JobView(id=row.id, name=row.name, queue=row.queue, state=row.state,
                       attempt=row.attempt, max_attempts=row.max_attempts, tenant=row.tenant,
                       idempotency_key=row.idempotency_key, priority=row.priority,
                       run_at=row.run_at, last_error=row.last_error, created_at=row.created_at,
                       finished_at=row.finished_at, enqueued_by=row.enqueued_by,
                       claimed_by=row.claimed_by, lease_expires_at=row.lease_expires_at,
                       payload=orjson.loads(row.payload) if full else None, history=history)

    # -- the queue ---------------------------------------------------------------------------

    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]:
        """``job_enqueue`` (+ ``job_find_live``): insert, or answer the live holder of the key."""
        if conn is not None and not (isinstance(conn, MemoryTransaction) and conn.driver is self):
            raise InvalidOption("conn", "the memory driver joins only a transaction from its own job_transaction()")
        check_new_jobs(jobs)
        payloads = [as_stored(job.payload) for job in jobs]
        results: list[Enqueued] = []
        with self._lock:
            at = self._now()
            for job, payload in zip(jobs, payloads):
                job_id, self._next_id = self._next_id, self._next_id + 1  # taken even when deduped
                holder = self._live.get(job.namespace)
                if holder is not None:
                    results.append(Enqueued(holder, True))
                    continue
                run_at = plus(at, job.delay_ms) if job.run_at_ms is None else ts(job.run_at_ms)
                self._jobs[job_id] = Row(
                    id=job_id, name=job.name, queue=job.queue, state="ready", payload=payload,
                    tenant=job.tenant, enqueued_by=job.enqueued_by, idempotency_key=job.idempotency_key,
                    priority=job.priority, max_attempts=job.max_attempts, run_at=run_at, created_at=at)
                self._live[job.namespace] = job_id
                if conn is not None:
                    conn.inserted.append(job_id)
                results.append(Enqueued(job_id, False))
        return results

    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float,
                  worker_id: str) -> list[ClaimedJob]:
        """``job_claim_one`` / ``job_claim_many``: due ready rows by priority, run_at, id."""
        queues, limit, lease_ms = check_claim(queues, limit, lease_ms)
        if limit == 0:
            return []
        token = secrets.randbits(63)
        wanted = set(queues)
        with self._lock:
            at = self._now()
            due = (r for r in self._jobs.values()
                   if r.state == "ready" and r.queue in wanted and r.run_at <= at)
            picked = heapq.nsmallest(limit, due, key=lambda r: (r.priority, r.run_at, r.id))
            for row in picked:
                self._move(row, "running")
                row.attempt += 1
                row.lease_token, row.claimed_by, row.started_at = token, worker_id, at
                row.lease_expires_at = plus(at, lease_ms)
            picked.sort(key=lambda r: r.id)
            return [ClaimedJob(r.id, r.name, r.queue, orjson.loads(r.payload), r.tenant, r.attempt,
                               r.max_attempts, r.priority, token) for r in picked]

    def job_ack_many(self, leases: Sequence[Lease]) -> set[int]:
        """``job_ack_many``: complete every job still held under its token."""
        with self._lock:
            at = self._now()
            done: set[int] = set()
            for lease in leases:
                row = self._held(lease.job_id, lease.token)
                if row is not None:
                    self._complete(row, at)
                    done.add(row.id)
            return done

    def job_ack(self, job_id: int, token: int) -> bool:
        return job_id in self.job_ack_many([Lease(job_id, token)])

    def job_nack(self, nack: Nack) -> bool:
        """``job_nack``: settle a held job as ready, suspended or dead, and write its history."""
        delay = finite_option(nack.delay_ms, "nack.delay", minimum=-math.inf)
        with self._lock:
            row = self._held(nack.job_id, nack.token)
            if row is None:
                return False
            at = self._now()
            row.attempt = row.attempt if nack.counts_as_attempt else max(row.attempt - 1, 0)
            self._move(row, "dead" if nack.dead else "suspended" if nack.park else "ready")
            if not nack.dead:
                row.run_at = plus(at, delay)
            row.finished_at = at if nack.dead else None
            if nack.error is not None:
                row.last_error = nack.error
            row.lease_token = row.lease_expires_at = None
            ran = row.attempt if nack.counts_as_attempt else row.attempt + 1
            self._record(row.id, at, ran, nack.outcome, nack.error)
            return True

    def job_heartbeat_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        """``job_heartbeat_many``: extend the lease of every job still held."""
        lease_ms = duration_ms(lease_ms, "heartbeat.lease", exclusive_minimum=True)
        with self._lock:
            at = self._now()
            extended: set[int] = set()
            for lease in leases:
                row = self._held(lease.job_id, lease.token)
                if row is not None:
                    row.lease_expires_at = plus(at, lease_ms)
                    extended.add(row.id)
            return extended

    def job_heartbeat(self, job_id: int, token: int, lease_ms: float) -> bool:
        return job_id in self.job_heartbeat_many([Lease(job_id, token)], lease_ms)

    def job_rescue(self, limit: int = 1000) -> int:
        """``job_rescue_lapsed`` then ``job_wake_due``, each bounded by ``limit``."""
        limit = check_row_limit(limit, "rescue.limit")
        with self._lock:
            at = self._now()
            lapsed = heapq.nsmallest(limit, (r for r in self._jobs.values() if r.state == "running"
                                             and r.lease_expires_at is not None and r.lease_expires_at < at),
                                     key=lambda r: (r.lease_expires_at, r.id))
            for row in lapsed:
                holder = row.claimed_by if row.claimed_by is not None else "?"
                self._fail_over(row, at, f"dead: lease expired on the last attempt, held by {holder}",
                                f"lease expired, held by {holder}")
            due = heapq.nsmallest(limit, (r for r in self._jobs.values()
                                          if r.state == "suspended" and r.run_at <= at),
                                  key=lambda r: (r.run_at, r.id))
            for row in due:
                self._move(row, "ready")
            return len(lapsed) + len(due)

    def job_release_worker(self, worker_id: str, counts_as_attempt: bool = True) -> int:
        """``job_release_worker``: every job a dead worker held goes back (or dies)."""
        with self._lock:
            at = self._now()
            held = [r for r in self._jobs.values() if r.state == "running" and r.claimed_by == worker_id]
            given_back = None if counts_as_attempt else (
                f"worker stopped by its supervisor, attempt not counted, {worker_id}")
            for row in held:
                self._fail_over(row, at, f"dead: worker died on the last attempt, {worker_id}",
                                f"worker died, {worker_id}", given_back)
            return len(held)

    def session_count(self, application_name: str) -> int:
        """``session_count``: no process holds a session on memory, so none can linger."""
        return 0

    def job_prune(self, completed_before_ms: float, finished_before_ms: float, limit: int = 1000) -> int:
        """``job_prune``: delete old finished rows and their history, oldest first."""
        limit = check_row_limit(limit, "prune.limit")
        completed_before = ts(finite_option(completed_before_ms, "prune.completed_before", minimum=-math.inf))
        finished_before = ts(finite_option(finished_before_ms, "prune.finished_before", minimum=-math.inf))
        with self._lock:
            doomed = heapq.nsmallest(limit, (
                r for r in self._jobs.values() if r.finished_at is not None and (
                    (r.state == "completed" and r.finished_at < completed_before)
                    or (r.state in ("dead", "cancelled") and r.finished_at < finished_before))),
                key=lambda r: (r.finished_at, r.id))
            for row in doomed:
                del self._jobs[row.id]
                self._history.pop(row.id, None)
            return len(doomed)

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease) -> Iterator[MemoryTransaction]:
        """``job_complete_fenced`` on a clean exit; ``LeaseLost`` if the lease is gone.

        Jobs enqueued with ``conn=`` the yielded object are deleted again on any failure, so
        a lost lease leaves no trace but the ids it consumed, as a rolled-back insert would.
        """
        tx = MemoryTransaction(self, lease)
        try:
            yield tx
            with self._lock:
                row = self._held(lease.job_id, lease.token)
                if row is None:
                    raise LeaseLost(f"job {lease.job_id} is no longer held by this worker; rolled back")
                self._complete(row, self._now())
        except BaseException:
            with self._lock:
                for job_id in tx.inserted:
                    row = self._jobs.pop(job_id, None)
                    self._history.pop(job_id, None)
                    if row is not None and self._live.get(row.namespace) == job_id:
                        del self._live[row.namespace]
            raise

    # -- introspection and operator verbs ---------------------------------------------------

    def job_list(self, where: ListFilter) -> list[JobView]:
        """``job_list``: newest first, each filter optional."""
        limit = check_row_limit(where.limit)
        views: list[JobView] = []
        with self._lock:
            for row in reversed(self._jobs.values()):
                if len(views) >= limit:
                    break
                if ((where.queue is None or row.queue == where.queue)
                        and (where.name is None or row.name == where.name)
                        and (where.state is None or row.state == where.state)):
                    views.append(self._view(row))
        return views

    def job_get(self, job_id: int) -> JobView:
        """``job_get`` with ``job_history``."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            return self._view(row, full=True)

    def job_dead(self, limit: int = 50) -> list[JobView]:
        return self.job_list(ListFilter(state="dead", limit=limit))

    def job_cancel(self, job_id: int, reason: str | None = None) -> JobView:
        """``job_cancel``: only a live job can be cancelled; a running one loses its lease."""
        reason = reason or "cancelled"
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            if row.state not in LIVE_STATES:
                raise NotCancellable(f"job {job_id} is {row.state}; only ready, running or suspended jobs can be cancelled")
            at = self._now()
            self._move(row, "cancelled")
            row.finished_at, row.last_error = at, reason
            row.lease_token = row.lease_expires_at = None
            self._record(row.id, at, row.attempt, "cancelled", reason)
            return self._view(row, full=True)

    def job_requeue(self, job_id: int) -> JobView:
        """``job_requeue``: a dead or cancelled job runs again from attempt 0."""
        with self._lock:
            row = self._jobs.get(job_id)
            if row is None:
                raise JobNotFound(f"no job with id {job_id}")
            if row.state not in ("dead", "cancelled"):
                raise NotRetryable(f"job {job_id} is {row.state}; only dead or cancelled jobs can be retried")
            at = self._now()
            self._move(row, "ready")  # DuplicateJob when a live job holds the key
            row.attempt, row.run_at, row.finished_at = 0, at, None
            self._record(row.id, at, 0, "requeued", None)
            return self._view(row, full=True)

    def job_stats(self) -> dict[str, dict[str, int]]:
        """``job_stats``: every row counted once, under its queue and state."""
        stats: dict[str, dict[str, int]] = {}
        with self._lock:
            for row in self._jobs.values():
                bucket = stats.setdefault(row.queue, {})
                bucket[row.state] = bucket.get(row.state, 0) + 1
        return stats

    def queue_counts(self) -> dict[str, dict[str, int]]:
        """``queue_counts``: like ``job_stats`` but only the states the hot indexes hold."""
        return {queue: kept for queue, counts in self.job_stats().items()
                if (kept := {s: n for s, n in counts.items() if s in COUNTED_STATES})}

    def queue_summary(self) -> dict[str, QueueSummary]:
        """``queue_summary``: ready-now depth and oldest ready-now ``run_at`` per queue."""
        with self._lock:
            at = self._now()
            oldest: dict[str, tuple[int, float]] = {}
            for row in self._jobs.values():
                if row.state == "ready" and row.run_at <= at:
                    depth, first = oldest.get(row.queue, (0, row.run_at))
                    oldest[row.queue] = (depth + 1, min(first, row.run_at))
        return {q: QueueSummary(depth=n, oldest_ready_ms=ts(at - first))
                for q, (n, first) in oldest.items()}
