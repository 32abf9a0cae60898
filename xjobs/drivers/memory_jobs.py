"""The memory driver's ``JobStore``: a copy of the semantics of its statements in ``queries.sql``.

Each method says which statement it mirrors, and works on the one ``MemoryTable`` under its
lock. Arguments arrive checked (``refusals.py``): ids and tokens are ``bigint``s, limits
whole, durations finite milliseconds, batches never empty.

Payloads are stored as a ``jsonb`` column gives them back (``jsonb.py``: ``1e16`` becomes an
int, keys are reordered) and decoded on every read, so each caller gets a fresh copy.

``job_listen`` answers a listener with nothing to wait on: a worker on this driver finds new
jobs by its poll timer, and the cancels of its running jobs (``MemoryListener``) at its next
pass. ``job_transaction`` cannot offer atomicity with a database; jobs
enqueued through the object it yields are visible at once and deleted again if the
transaction rolls back.
"""

from __future__ import annotations

import contextlib
import heapq
import secrets
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import orjson

from ..errors import InvalidOption
from .base import (CallerConnection, Cancels, Claim, ClaimAlone, ClaimedJob, Enqueued, JobStore, Lease, Nack,
                   NewJob, Progress, TenantRoom)
from .jsonb import as_stored
from .memory_rate_keys import rate_open
from .memory_table import MemoryTable, Row, by_claim_order, plus, ts
from .records import CANCEL_NAMED
from .refusals import held, lease_lost


@dataclass
class MemoryTransaction:
    """What the memory driver's ``job_transaction`` yields; pass it as ``conn=`` to enqueue
    inside it."""

    table: MemoryTable
    lease: Lease
    inserted: list[int] = field(default_factory=list)
    events: list[int] = field(default_factory=list)    # sent through it (memory_steps)
    # jobs its sends woke: id, run_at before, the waits it completed
    woken: list[tuple[int, float, list[str]]] = field(default_factory=list)


class IdleListener:
    """A ``JobListener`` with nothing to wait on: no server announces new jobs in memory."""

    def fileno(self) -> int | None:
        return None

    def poll(self) -> set[str]:
        return set()

    def cancels(self) -> Cancels:
        return Cancels()

    def close(self) -> None:
        pass


class MemoryListener(IdleListener):
    """``job_listen(holder)``: no new jobs announced, and the cancels of ``holder``'s running
    jobs heard as the Postgres driver's notifications say them: each cancel's jobs by name, or
    none once a batch cancelled more than ``CANCEL_NAMED`` of them (check every run)."""

    def __init__(self, table: MemoryTable, holder: str) -> None:
        self._table = table
        self.holder = holder
        self._ids: set[int] = set()
        self._every = False
        with table.lock:
            table.hearers.add(self)

    def hear(self, ids: Sequence[int]) -> None:
        if len(ids) > CANCEL_NAMED:
            self._every = True
        else:
            self._ids.update(ids)

    def cancels(self) -> Cancels:
        with self._table.lock:
            heard = Cancels(frozenset(self._ids), self._every)
            self._ids, self._every = set(), False
        return heard

    def close(self) -> None:
        with self._table.lock:
            self._table.hearers.discard(self)


def _waits(holder: Row) -> bool:
    """Whether a key's job has not started yet: ready, never claimed (``job_debounce``)."""
    return holder.state == "ready" and holder.started_at is None


def _debounced(holder: Row, job: NewJob, at: float) -> bool:
    """``job_debounce``: a debounced input moves a holder that has not started yet."""
    if job.debounce_ms is None or not _waits(holder):
        return False
    holder.payload = as_stored(job.payload)
    holder.run_at = plus(at, job.debounce_ms)
    if job.debounce_max_ms is not None:
        holder.run_at = min(holder.run_at, plus(holder.created_at, job.debounce_max_ms))
    return True


class MemoryJobs(JobStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def job_enqueue(self, jobs: Sequence[NewJob], conn: CallerConnection | None = None) -> list[Enqueued]:
        """``job_enqueue`` (+ ``job_find_holder``): insert, or answer the holder of the key."""
        table = self._table
        # what counts as a connection is this driver's own business: only its transaction
        if conn is not None and not (isinstance(conn, MemoryTransaction) and conn.table is table):
            raise InvalidOption("conn", "the memory driver joins only a transaction from its own job_transaction()")
        with table.lock:
            return self.insert_locked(jobs, conn)

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]],
                           conn: CallerConnection | None = None) -> list[Enqueued]:
        """``job_enqueue`` of every chunk at once: gathered first, so a chunk that fails to build
        writes nothing, then inserted under one hold of the lock."""
        return self.job_enqueue([job for chunk in chunks for job in chunk], conn)

    def insert_locked(self, jobs: Sequence[NewJob], conn: MemoryTransaction | None = None) -> list[Enqueued]:
        """The insert of ``job_enqueue``, for a caller that already holds the table's lock (a
        dispatch or an outbox publish, whose enqueue is part of one atomic step)."""
        table = self._table
        results: list[Enqueued] = []
        at = table.now()
        # job_debounce is sent before the insert: a debounced key whose job waits already moves
        # it without an id taken; one inserted by this very call is moved after (an id taken)
        waiting = {job.namespace for job in jobs if job.debounce_ms is not None
                   and job.namespace in table.live and _waits(table.rows[table.live[job.namespace]])}
        for job in jobs:
            if job.debounce_ms is not None and job.namespace in waiting:
                waiter = table.live[job.namespace]
                results.append(Enqueued(waiter, True, _debounced(table.rows[waiter], job, at)))
                continue
            if job.dedupe_window_ms is not None:   # filtered before the insert: no id taken
                kept = table.in_window(job.namespace, at)
                if kept is not None:   # job_find_holder answers a live holder first
                    live = table.live.get(job.namespace)
                    results.append(Enqueued(kept, True) if live is None else
                                   Enqueued(live, True, _debounced(table.rows[live], job, at)))
                    continue
            job_id = table.take_id()   # taken even when deduped
            holder = table.live.get(job.namespace)
            if holder is not None:
                results.append(Enqueued(holder, True, _debounced(table.rows[holder], job, at)))
                continue
            run_at = plus(at, job.delay_ms) if job.run_at_ms is None else ts(job.run_at_ms)
            table.insert(Row(
                id=job_id, name=job.name, queue=job.queue, state="ready", payload=as_stored(job.payload),
                tenant=job.tenant, enqueued_by=job.enqueued_by, idempotency_key=job.idempotency_key,
                priority=job.priority, max_attempts=job.max_attempts, run_at=run_at, created_at=at,
                dedupe_window_ms=(None if job.dedupe_window_ms is None else ts(job.dedupe_window_ms)),
                traceparent=job.traceparent, concurrency_key=job.concurrency_key, key_cap=job.key_cap,
                key_hold=job.key_hold, fair_key=job.fair_key, rate_key=job.rate_key))
            if conn is not None:
                conn.inserted.append(job_id)
            results.append(Enqueued(job_id, False))
        return results

    def job_claim(self, claim: Claim) -> list[ClaimedJob]:
        """``job_claim_one`` / ``job_claim_many`` / ``job_claim_filtered``: due ready rows by
        priority, run_at, id; filtered as ``job_claim_filtered`` says (the picks are counted
        per job and per tenant over everything picked, as its window functions count)."""
        table = self._table
        room, names = claim.tenants or TenantRoom(), claim.names
        with table.lock:
            at = table.now()
            wanted = {q for q in claim.queues if not table.is_paused(q)}
            slots = {job: cap - table.slots_held(job, at) for job, cap in (claim.caps or {}).items()}
            blocked = set(room.blocked)
            due = (r for r in table.rows.values()
                   if r.state == "ready" and r.queue in wanted and r.run_at <= at and r.crashes == 0
                   and slots.get(r.name, 1) > 0 and (r.tenant or "") not in blocked and rate_open(table, r, at)
                   and (names is None or r.name in names))
            picked = heapq.nsmallest(claim.limit, due, key=by_claim_order)
            of_job: dict[str, int] = {}
            of_tenant: dict[str, int] = {}
            chosen = []
            for row in picked:
                tenant = row.tenant or ""
                of_job[row.name] = nth_of_job = of_job.get(row.name, 0) + 1
                of_tenant[tenant] = nth_of_tenant = of_tenant.get(tenant, 0) + 1
                if row.name in slots and nth_of_job > slots[row.name]:
                    continue
                if room.ceiling is not None and nth_of_tenant > room.ceiling - room.held.get(tenant, 0):
                    continue
                chosen.append(row)
            return self.take(chosen, at, claim.lease_ms, claim.identity)

    def job_claim_alone(self, claim: ClaimAlone) -> list[ClaimedJob]:
        """``job_claim_alone``: the first suspect that has waited ``waited_ms`` and the rest of
        its group, ``limit`` in all, to run with nothing beside them."""
        table = self._table
        queue, names, lease_ms, identity = claim.queue, claim.names, claim.lease_ms, claim.identity
        with table.lock:
            at = table.now()
            if table.is_paused(queue):
                return []
            since = ts(at - ts(claim.waited_ms))

            def suspect(r: Row) -> bool:
                return (r.state == "ready" and r.queue == queue and r.crashes > 0 and r.run_at <= at
                        and (names is None or r.name in names))
            lead = heapq.nsmallest(1, (r for r in table.rows.values() if suspect(r) and r.run_at <= since
                                       and rate_open(table, r, at)),
                                   key=by_claim_order)
            if not lead or lead[0].suspect_group is None:
                return self.take(lead, at, lease_ms, identity)
            group = lead[0].suspect_group
            members = heapq.nsmallest(claim.limit - 1, (r for r in table.rows.values() if suspect(r)
                                                  and r.suspect_group == group and r is not lead[0]),
                                      key=by_claim_order)
            return self.take(lead + members, at, lease_ms, identity)

    def take(self, picked: list[Row], at: float, lease_ms: float, identity: str) -> list[ClaimedJob]:
        """Lease the rows picked (the update of every claim statement); under ``lock``."""
        token = secrets.randbits(63)
        first = {row.id for row in picked if row.started_at is None}   # never claimed before
        for row in picked:
            self._table.move(row, "running")
            row.attempt += 1
            row.lease_token, row.claimed_by, row.started_at = token, identity, at
            row.lease_expires_at = plus(at, lease_ms)
            row.progress = None
        picked.sort(key=lambda r: r.id)
        return [ClaimedJob(r.id, r.name, r.queue, orjson.loads(r.payload), r.tenant, r.attempt,
                           r.max_attempts, r.priority, token, r.traceparent, r.snoozes, r.id in first)
                for r in picked]

    def job_ack_many(self, leases: Sequence[Lease], results: Mapping[int, bytes] | None = None) -> set[int]:
        """``job_ack_many``: complete every job still held under its token, with its result."""
        table, found = self._table, results or {}
        with table.lock:
            at = table.now()
            done: set[int] = set()
            for lease in leases:
                row = table.held(lease.job_id, lease.token)
                if row is not None:
                    value = found.get(row.id)
                    table.complete(row, at, None if value is None else as_stored(value))
                    done.add(row.id)
            return done

    def job_nack_many(self, nacks: Sequence[Nack]) -> set[int]:
        """``job_nack_many``: settle each held job as its outcome says (``records.Nack``), and
        write its history (a shed: none, and with no delay it keeps its run_at)."""
        table = self._table
        with table.lock:
            at = table.now()
            settled: set[int] = set()
            for nack in nacks:
                row = table.held(nack.job_id, nack.token)
                if row is not None:
                    self._settle(row, nack, at)
                    settled.add(row.id)
            return settled

    def _settle(self, row: Row, nack: Nack, at: float) -> None:
        table, dead = self._table, nack.outcome == "dead"
        row.attempt = row.attempt if nack.counts else max(row.attempt - 1, 0)
        if nack.counts:   # the run ended on its own: no longer a crash suspect
            row.crashes, row.suspect_group = 0, None
        row.snoozes += nack.outcome == "snoozed"
        table.move(row, "dead" if dead else "suspended" if nack.outcome == "suspended" else "ready")
        shed = nack.outcome == "shed"
        if not dead and not (shed and nack.delay_ms == 0):   # a shed keeps its place
            row.run_at = plus(at, nack.delay_ms)
        row.finished_at = at if dead else None
        if nack.error is not None:
            row.last_error = nack.error
        row.lease_token = row.lease_expires_at = None
        if not shed:   # a shed is counted by the worker, not an event in the job's history
            ran = row.attempt if nack.counts else row.attempt + 1
            table.record(row.id, at, ran, nack.outcome, nack.error, nack.traceback)

    def job_renew_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        """``job_renew_many``: extend the lease of every job still held."""
        table = self._table
        with table.lock:
            at = table.now()
            extended: set[int] = set()
            for lease in leases:
                row = table.held(lease.job_id, lease.token)
                if row is not None:
                    row.lease_expires_at = plus(at, lease_ms)
                    extended.add(row.id)
            return extended

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        """``job_progress_many``: the latest report of each run still holding its job."""
        table = self._table
        with table.lock:
            written: set[int] = set()
            for report in reports:
                row = table.held(report.lease.job_id, report.lease.token)
                if row is not None:
                    row.progress = orjson.loads(orjson.dumps(report.as_json()))
                    written.add(row.id)
            return written

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease, tenant: str | None = None, cross_tenant: bool = False,
                        result: Callable[[], bytes | None] | None = None) -> Iterator[MemoryTransaction]:
        """``job_complete_fenced`` on a clean exit; ``LeaseLost`` if the lease is gone.

        Jobs enqueued with ``conn=`` the yielded object are deleted again on any failure, so
        a lost lease leaves no trace but the ids it consumed, as a rolled-back insert would.
        """
        table = self._table
        tx = MemoryTransaction(table, lease)
        try:
            yield tx
            with table.lock:
                row = table.held(lease.job_id, lease.token) if held(lease) else None
                if row is None:
                    raise lease_lost(lease)
                value = None if result is None else result()
                table.complete(row, table.now(), None if value is None else as_stored(value))
        except BaseException:
            with table.lock:
                for job_id in tx.inserted:
                    if (inserted := table.rows.get(job_id)) is not None:
                        table.forget(inserted)
                table.forget_events(tx.events)
                for job_id, run_at, names in tx.woken:   # a send that rolled back woke nobody
                    row = table.rows.get(job_id)
                    if row is not None and row.state == "ready":
                        table.move(row, "suspended")
                        row.run_at = run_at
                    for name in names:
                        step = table.steps.get(job_id, {}).get(name)
                        if step is not None:
                            step.state, step.result, step.finished_at = "waiting", None, None
            raise

    def job_listen(self, holder: str | None = None) -> IdleListener:
        return IdleListener() if holder is None else MemoryListener(self._table, holder)
