"""An in-memory driver: a copy of the semantics of ``queries.sql``, one statement at a time.

Each method says which statement it mirrors. The conformance suite runs the same tests
against this driver and ``PostgresDriver``, so any drift from the SQL is a failing test, not
a convenience. What the SQL gets from the database, this module spells out:

- ids come from one counter that every *attempted* insert row consumes, deduplicated or not,
  as an identity column does under ``on conflict do nothing``;
- ``_live`` is the partial unique index ``jobs_idempotency_idx``: (name, tenant or '', key)
  over ready, running and suspended rows, kept in step by ``_move``; ``_windowed`` is
  ``jobs_dedupe_idx``, the completed rows of jobs that keep their key for a window;
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
from .base import (LIVE_STATES, ClaimedJob, Enqueued, JobView, Lease, Nack, NewJob, Progress,
                   Released, check_charge, check_claim, check_new_jobs, check_row_limit, is_bigint)
from .jsonb import as_stored
from .memory_inspect import MemoryInspectMixin
from .memory_table import Row, plus, ts
from .sql import check_schema_name


@dataclass
class MemoryTransaction:
    """What ``MemoryDriver.job_transaction`` yields; pass it as ``conn=`` to enqueue inside it."""

    driver: "MemoryDriver"
    lease: Lease
    inserted: list[int] = field(default_factory=list)


class MemoryDriver(MemoryInspectMixin):
    server_clock = False   # no server: the injected clock is now in every verb

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, schema: str = "xjobs") -> None:
        self.clock = clock
        self.schema = check_schema_name(schema)
        self._lock = threading.Lock()
        self._jobs: dict[int, Row] = {}            # in id order, like the identity column
        self._history: dict[int, list[tuple[float, int, str, str | None]]] = {}
        self._live: dict[tuple[str, str, str], int] = {}
        self._windowed: dict[tuple[str, str, str], list[int]] = {}
        self._paused: dict[str, tuple[bool, float, str | None]] = {}   # the queues table
        self._crashed_workers: dict[str, float] = {}   # worker -> when seen dying beside others
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
        if row.dedupe_window_ms is not None:
            self._windowed.setdefault(row.namespace, []).append(row.id)

    def _in_window(self, namespace: tuple[str, str, str], at: float) -> int | None:
        """The newest completed job of ``namespace`` still inside its dedupe window."""
        inside = [i for i in self._windowed.get(namespace, ())
                  if plus(self._jobs[i].finished_at, self._jobs[i].dedupe_window_ms) > at]
        return max(inside) if inside else None

    def _forget(self, row: Row) -> None:
        """Delete a row and what indexes it (prune, a rolled-back transaction's insert)."""
        del self._jobs[row.id]
        self._history.pop(row.id, None)
        if self._live.get(row.namespace) == row.id:
            del self._live[row.namespace]
        windowed = self._windowed.get(row.namespace)
        if windowed is not None and row.id in windowed:
            windowed.remove(row.id)
            if not windowed:
                del self._windowed[row.namespace]

    def _hand_back(self, row: Row, at: float, *, charged: bool, dead_error: str, error: str,
                   outcome: str, suspect: bool) -> None:
        """``job_rescue_lapsed`` / ``job_release_worker`` for one row: ``charged`` keeps the
        attempt (dead on the last one), otherwise it is given back; ``suspect`` counts one
        more crash the job was caught in. The attempt is written to the history."""
        ran = row.attempt
        dead = charged and row.attempt >= row.max_attempts
        self._move(row, "dead" if dead else "ready")
        row.run_at, row.finished_at = at, (at if dead else None)
        if not charged:
            row.attempt = max(row.attempt - 1, 0)
        if suspect:
            row.crashes += 1
        row.last_error = dead_error if dead else error
        row.lease_token = row.lease_expires_at = None
        self._record(row.id, at, ran, "dead" if dead else outcome, row.last_error)

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
                if job.dedupe_window_ms is not None:   # filtered before the insert: no id taken
                    kept = self._in_window(job.namespace, at)
                    if kept is not None:   # job_find_holder answers a live holder first
                        results.append(Enqueued(self._live.get(job.namespace, kept), True))
                        continue
                job_id, self._next_id = self._next_id, self._next_id + 1  # taken even when deduped
                holder = self._live.get(job.namespace)
                if holder is not None:
                    results.append(Enqueued(holder, True))
                    continue
                run_at = plus(at, job.delay_ms) if job.run_at_ms is None else ts(job.run_at_ms)
                self._jobs[job_id] = Row(
                    id=job_id, name=job.name, queue=job.queue, state="ready", payload=payload,
                    tenant=job.tenant, enqueued_by=job.enqueued_by, idempotency_key=job.idempotency_key,
                    priority=job.priority, max_attempts=job.max_attempts, run_at=run_at, created_at=at,
                    dedupe_window_ms=(None if job.dedupe_window_ms is None else ts(job.dedupe_window_ms)))
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
        with self._lock:
            at = self._now()
            wanted = {q for q in queues if not self._is_paused(q)}
            due = (r for r in self._jobs.values()
                   if r.state == "ready" and r.queue in wanted and r.run_at <= at and r.crashes == 0)
            return self._take(heapq.nsmallest(limit, due, key=lambda r: (r.priority, r.run_at, r.id)),
                              at, lease_ms, worker_id)

    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0) -> list[ClaimedJob]:
        """``job_claim_alone``: one suspect that has waited ``waited_ms``, to run with nothing beside it."""
        [queue], _, lease_ms = check_claim([queue], 1, lease_ms)
        waited = duration_ms(waited_ms, "claim.waited")
        with self._lock:
            at = self._now()
            if self._is_paused(queue):
                return []
            since = ts(at - ts(waited))
            due = (r for r in self._jobs.values()
                   if r.state == "ready" and r.queue == queue and r.crashes > 0 and r.run_at <= since)
            return self._take(heapq.nsmallest(1, due, key=lambda r: (r.priority, r.run_at, r.id)),
                              at, lease_ms, worker_id)

    def _take(self, picked: list[Row], at: float, lease_ms: float, worker_id: str) -> list[ClaimedJob]:
        token = secrets.randbits(63)
        for row in picked:
            self._move(row, "running")
            row.attempt += 1
            row.lease_token, row.claimed_by, row.started_at = token, worker_id, at
            row.lease_expires_at = plus(at, lease_ms)
            row.progress = None
        picked.sort(key=lambda r: r.id)
        return [ClaimedJob(r.id, r.name, r.queue, orjson.loads(r.payload), r.tenant, r.attempt,
                           r.max_attempts, r.priority, token) for r in picked]

    def _is_paused(self, queue: str) -> bool:
        entry = self._paused.get(queue)
        return entry is not None and entry[0]

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
            if nack.counts_as_attempt:   # the run ended on its own: no longer a crash suspect
                row.crashes = 0
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
            holders = {r.claimed_by for r in lapsed}
            company: dict[str | None, int] = {}
            for r in self._jobs.values():
                if r.state == "running" and r.claimed_by in holders:
                    company[r.claimed_by] = company.get(r.claimed_by, 0) + 1
            judged = {r.id: company.get(r.claimed_by, 1) == 1 and r.claimed_by not in self._crashed_workers
                      for r in lapsed}
            for row in lapsed:
                if not judged[row.id] and row.claimed_by is not None:
                    self._crashed_workers.setdefault(row.claimed_by, at)
            for row in lapsed:
                holder = row.claimed_by if row.claimed_by is not None else "?"
                alone = judged[row.id]
                self._hand_back(
                    row, at, charged=alone, suspect=not alone,
                    dead_error=f"dead: lease expired on the last attempt, held by {holder}",
                    error=(f"lease expired, held by {holder}" if alone else
                           f"lease expired beside other jobs of {holder}; attempt not counted, runs alone next"),
                    outcome="lapsed" if alone else "quarantined")
            due = heapq.nsmallest(limit, (r for r in self._jobs.values()
                                          if r.state == "suspended" and r.run_at <= at),
                                  key=lambda r: (r.run_at, r.id))
            for row in due:
                self._move(row, "ready")
            return len(lapsed) + len(due)

    def job_release_worker(self, worker_id: str, *, crashed: bool = True, how: str = "died",
                           charge: str = "alone") -> list[Released]:
        """``job_release_worker``: every job a dead worker held goes back; a crash charges only
        a job that ran alone (as ``charge`` allows), and makes suspects of the others."""
        charge = check_charge(charge)
        with self._lock:
            at = self._now()
            held = [r for r in self._jobs.values() if r.state == "running" and r.claimed_by == worker_id]
            alone = crashed and len(held) == 1 and worker_id not in self._crashed_workers
            released = []
            for row in held:
                charged = alone and (charge == "alone" or (charge == "suspect" and row.crashes > 0))
                if not crashed:
                    error, outcome = f"worker stopped by its supervisor, attempt not counted, {worker_id}", "interrupted"
                elif charged:
                    error, outcome = f"crashed its worker process ({how}, {worker_id}); attempt counted, runs alone next", "crashed"
                else:
                    error = (f"worker process {how} ({worker_id}) running {len(held)} job(s); "
                             "attempt not counted, runs alone next")
                    outcome = "quarantined"
                    self._crashed_workers.setdefault(worker_id, at)
                self._hand_back(row, at, charged=charged, suspect=crashed, error=error, outcome=outcome,
                                dead_error=f"dead: crashed its worker process on the last attempt ({how}, {worker_id})")
                released.append(Released(row.id, row.name, row.queue, row.state,
                                         "dead" if row.state == "dead" else outcome))
            return released

    def session_count(self, application_name: str) -> int:
        """``session_count``: no process holds a session on memory, so none can linger."""
        return 0

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        """``job_prune``: delete finished rows past their retention (on the clock), oldest first."""
        limit = check_row_limit(limit, "prune.limit")
        completed_for = duration_ms(completed_for_ms, "prune.completed_for")
        finished_for = duration_ms(finished_for_ms, "prune.finished_for")
        with self._lock:
            at = self._now()
            completed_before, finished_before = ts(at - ts(completed_for)), ts(at - ts(finished_for))
            doomed = heapq.nsmallest(limit, (
                r for r in self._jobs.values() if r.finished_at is not None and (
                    (r.state == "completed" and r.finished_at < completed_before
                     and (r.dedupe_window_ms is None or plus(r.finished_at, r.dedupe_window_ms) < at))
                    or (r.state in ("dead", "cancelled") and r.finished_at < finished_before))),
                key=lambda r: (r.finished_at, r.id))
            for row in doomed:
                self._forget(row)
            for worker in [w for w, seen in self._crashed_workers.items() if seen < finished_before]:
                del self._crashed_workers[worker]
            return len(doomed)

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        """``job_progress_many``: the latest report of each run still holding its job."""
        with self._lock:
            written: set[int] = set()
            for report in reports:
                row = self._held(report.lease.job_id, report.lease.token)
                if row is not None:
                    row.progress = orjson.loads(orjson.dumps(report.as_json()))
                    written.add(row.id)
            return written

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
                    if (row := self._jobs.get(job_id)) is not None:
                        self._forget(row)
            raise
