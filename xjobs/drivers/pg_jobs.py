"""The Postgres driver's ``JobStore``: enqueue, claim, settle, renew, report, a body's transaction.

Every statement comes from ``queries.sql`` (through ``PgDatabase``); this module only binds
parameters and shapes results. Arguments arrive checked (``refusals.py``): ids and tokens
are ``bigint``s, limits whole, durations finite milliseconds, batches never empty.

Fences: ack, nack, renewal, progress and a body's completion match ``state = 'running'``
AND the claim's ``lease_token``. A worker that lost its lease (rescued, cancelled, released)
matches no row, so it can never overwrite the state of a job somebody else now runs. The
batch verbs are planned for the batch at hand (``prepare=False``, see ``job_ack_many``).
"""

from __future__ import annotations

import contextlib
import secrets
import select
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

import orjson
import psycopg
from psycopg.rows import tuple_row

from ..errors import XJobsError
from .base import (CallerConnection, Claim, ClaimAlone, ClaimedJob, Enqueued, JobStore, Lease, Nack, NewJob,
                   Progress, TenantRoom)
from .pg_database import PgDatabase, callers_connection, driver_errors, in_callers_transaction
from .pg_debounce import debounce_plan
from .pg_listen import PgListener
from .pg_plan import Plan, run_on
from .records import ENQUEUE_CHUNK
from .refusals import held, lease_lost


def _int_array(values: Iterable[int]) -> str:
    """A bigint[] literal: joining digits is far cheaper than binding an array per element
    (values are checked integers, so the literal cannot carry anything else)."""
    return "{" + ",".join(map(str, values)) + "}"


def enqueue_params(db: PgDatabase, jobs: Sequence[NewJob]) -> dict[str, Any]:
    return {**db.now(), "rows": orjson.dumps([j.document() for j in jobs]).decode()}


def _flush(conn: psycopg.Connection[Any]) -> None:
    """Everything libpq holds for the server sent: a pipeline sends a statement only as far as
    the socket takes it at once, and the server cannot start a statement it has not read whole.
    A chunk's document is about half a megabyte: a loopback socket takes it at once, a network
    connection's send buffer may not, and the rest would wait for the answer to be asked for."""
    while conn.pgconn.flush():
        select.select([], [conn.pgconn.socket], [])


def copyable(job: NewJob) -> bool:
    """Whether ``job_enqueue_copy`` may write the job: when nothing but the unique index of
    live namespaces decides whether it goes in (a dedupe window reads completed rows, a debounce
    moves a held job) and it goes in ready (a keyed row waits for its key's trigger)."""
    return job.dedupe_window_ms is None and job.debounce_ms is None and job.concurrency_key is None


def copy_row(job: NewJob, job_id: int, now: datetime, stamp: str) -> tuple[Any, ...]:
    """The job as ``job_enqueue_copy``'s row, the columns ``job_enqueue`` writes computed as it
    computes them. ``stamp``: ``now`` already formatted, the run_at of every job due at once."""
    if job.run_at_ms is not None:
        run_at: str | datetime = datetime.fromtimestamp(job.run_at_ms / 1000.0, timezone.utc)
    elif job.delay_ms:
        run_at = now + timedelta(milliseconds=job.delay_ms)
    else:
        run_at = stamp
    return (job_id, job.name, job.queue, "ready", job.payload.decode(), job.idempotency_key, job.tenant,
            job.enqueued_by, job.priority, job.max_attempts, run_at, stamp, job.traceparent, job.key_hold,
            job.fair_key, job.rate_key)


def enqueue_plan(db: PgDatabase, jobs: Sequence[NewJob]) -> Plan[list[Enqueued]]:
    """``job_enqueue``, then ``job_find_holder`` for the inputs whose key is held, until every
    input is answered (``pg_plan``: run on a cursor, or awaited on an ``AsyncConnection``);
    debounced inputs go to ``job_debounce`` before the insert and after it (``pg_debounce``)."""
    results: list[Enqueued | None] = [None] * len(jobs)
    spaces = [job.namespace for job in jobs]
    pending = list(range(len(jobs)))
    # a debounced key is most often held (a burst): move its job, insert the rest
    _answer_moved((yield from debounce_plan(db, jobs)), jobs, results)
    pending = [i for i in pending if results[i] is None]
    if not pending:
        return [r for r in results if r is not None]
    for _round in range(4):
        answered = yield "job_enqueue", enqueue_params(db, [jobs[i] for i in pending])
        inserted = {(r[1], r[2], r[3]): r[0] for r in answered}
        # an input whose namespace went in answers that row; a second input with the
        # same namespace (pop leaves nothing) is a duplicate of it, found below
        missing = []
        for i in pending:
            job_id = inserted.pop(spaces[i], None)
            if job_id is None:
                missing.append(i)
            else:
                results[i] = Enqueued(job_id, False)
        # a key this very call inserted (or a holder that raced in) takes its newest input now
        _answer_moved((yield from debounce_plan(db, [jobs[i] for i in missing])), jobs, results)
        missing = [i for i in missing if results[i] is None]
        if not missing:
            return [r for r in results if r is not None]   # every one is answered
        wanted = sorted({spaces[i] for i in missing})
        keys = orjson.dumps([{"n": n, "t": t, "k": k} for n, t, k in wanted]).decode()
        holders = yield "job_find_holder", {**db.now(), "keys": keys}
        live: dict[tuple[str, str, str], int] = {}
        for r in holders:   # live holders come first: keep the first per namespace
            live.setdefault((r[1], r[2], r[3]), r[0])
        # rows inserted by this very call count as live holders too
        live.update((spaces[i], r.id) for i, r in enumerate(results) if r is not None and not r.deduped)
        pending = []
        for i in missing:
            if spaces[i] in live:
                results[i] = Enqueued(live[spaces[i]], True)
            else:  # the holder finished (or its window closed) between insert and lookup
                pending.append(i)
    raise XJobsError("enqueue raced with a finishing duplicate four times", code="X_JOB_ENQUEUE_RACE")


def _answer_moved(moved: Mapping[tuple[str, str, str], int], jobs: Sequence[NewJob],
                  results: list[Enqueued | None]) -> None:
    """Every debounced input not answered yet whose key's job ``job_debounce`` moved."""
    if not moved:   # no debounced input, or no holder moved: nothing to look for
        return
    for i, job in enumerate(jobs):
        if results[i] is None and job.debounce_ms is not None and job.namespace in moved:
            results[i] = Enqueued(moved[job.namespace], True, True)


class PgJobs(JobStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def job_enqueue(self, jobs: Sequence[NewJob], conn: CallerConnection | None = None) -> list[Enqueued]:
        """``job_enqueue``, then ``job_find_holder`` for the inputs whose key is held; a batch
        larger than ``ENQUEUE_CHUNK`` goes as ``job_enqueue_chunks`` does."""
        if len(jobs) <= ENQUEUE_CHUNK:
            with self._db.cursor(conn) as cur:
                return run_on(cur, self._db.sql, enqueue_plan(self._db, jobs))
        return self.job_enqueue_chunks((jobs[start:start + ENQUEUE_CHUNK]
                                        for start in range(0, len(jobs), ENQUEUE_CHUNK)), conn)

    def job_enqueue_chunks(self, chunks: Iterable[Sequence[NewJob]],
                           conn: CallerConnection | None = None) -> list[Enqueued]:
        """The chunks of one call in ONE transaction (a savepoint on the caller's ``conn``):
        all of it or none. A chunk whose jobs are all ``copyable`` and whose namespaces neither
        repeat nor were seen in an earlier chunk is written by ``copy_chunk``; any other, and
        one whose COPY met a live holder, by ``insert_chunk`` (``job_enqueue``'s plan), which answers
        holders and duplicates (rows copied by the chunks before are already in the table for
        it). Either way the next chunk is built while the server writes this one."""
        results: list[Enqueued] = []
        with contextlib.ExitStack() as stack:
            own = callers_connection(conn) if conn is not None else stack.enter_context(self._db.connection())
            stack.enter_context(in_callers_transaction(own))
            cur = stack.enter_context(own.cursor(row_factory=tuple_row))
            seen: set[tuple[str, str, str]] = set()
            pending = iter(chunks)
            jobs = next(pending, None)
            while jobs is not None:
                spaces = {job.namespace for job in jobs}
                copied: list[Enqueued] | None = None
                following: Sequence[NewJob] | None = None
                if jobs and len(spaces) == len(jobs) and seen.isdisjoint(spaces) and all(map(copyable, jobs)):
                    copied, following = self.copy_chunk(own, cur, jobs, pending)
                if copied is None and jobs:
                    copied, following = self.insert_chunk(own, cur, jobs, pending, following)
                results += copied or []
                seen |= spaces
                jobs = following if following is not None else next(pending, None)
        return results

    def copy_chunk(self, own: psycopg.Connection[Any], cur: psycopg.Cursor[Any], jobs: Sequence[NewJob],
                   pending: Iterator[Sequence[NewJob]]) -> tuple[list[Enqueued] | None, Sequence[NewJob] | None]:
        """``jobs`` written by COPY under a savepoint, with ids drawn first (``job_enqueue_ids``),
        answered in input order; and the next chunk, built (by ``pending``) while the server
        still writes this one. (None, the next chunk if it was built) when a live holder of one
        of the namespaces failed the COPY: the savepoint leaves nothing of it. A refusal raised while the next
        chunk is built aborts the COPY and propagates, and the call writes nothing."""
        cur.execute(self._db.sql["job_enqueue_ids"], {**self._db.now(), "count": len(jobs)})
        now, ids = cast("tuple[datetime, list[int]]", cur.fetchone())   # a select of no table: one row
        stamp = now.isoformat()
        following: Sequence[NewJob] | None = None
        try:
            with own.transaction(), cur.copy(self._db.sql["job_enqueue_copy"]) as copy:
                for job, job_id in zip(jobs, ids):
                    copy.write_row(copy_row(job, job_id, now, stamp))
                following = next(pending, None)   # built while the server writes the rows
        except psycopg.errors.UniqueViolation:
            return None, following
        return [Enqueued(job_id, False) for job_id in ids], following

    def insert_chunk(self, own: psycopg.Connection[Any], cur: psycopg.Cursor[Any], jobs: Sequence[NewJob],
                     pending: Iterator[Sequence[NewJob]], following: Sequence[NewJob] | None
                     ) -> tuple[list[Enqueued], Sequence[NewJob] | None]:
        """``jobs`` by ``enqueue_plan``, and the next chunk (``following``, unless it is built
        already): the plan's first statement is sent in a pipeline, and the next chunk built
        while the server runs it, so a chunk COPY cannot take (a dedupe window, a debounce, a
        key, a namespace repeated, a holder met) still overlaps the client's work with the
        server's."""
        plan = enqueue_plan(self._db, jobs)
        try:
            name, params = next(plan)
        except StopIteration as done:   # a plan may need no statement at all
            return cast("list[Enqueued]", done.value), following
        with own.pipeline():
            cur.execute(self._db.sql[name], params)
            _flush(own)
            if following is None:
                following = next(pending, None)   # built while the server runs the statement
            rows = cur.fetchall()
        return run_on(cur, self._db.sql, plan, first=rows), following

    def job_claim(self, claim: Claim) -> list[ClaimedJob]:
        """``job_claim_one`` (the common case: one queue, nothing to filter),
        ``job_claim_filtered`` (a worker with capped jobs or tenant limits) or
        ``job_claim_many`` (whose callers filter nothing)."""
        queues, caps = claim.queues, claim.caps or {}
        params: dict[str, Any] = {**self._db.now(), "limit": claim.limit, "token": secrets.randbits(63),
                                  "worker": claim.identity, "lease": claim.lease_ms,
                                  "names": None if claim.names is None else sorted(claim.names)}
        if len(queues) == 1 and (caps or claim.tenants is not None):
            room = claim.tenants or TenantRoom()
            name, params["queue"] = "job_claim_filtered", queues[0]
            params.update(
                caps=orjson.dumps([{"n": job, "c": cap} for job, cap in sorted(caps.items())]).decode(),
                skip=list(room.blocked), tenant_cap=room.ceiling,
                held=orjson.dumps([{"t": t, "n": n} for t, n in room.held.items()]).decode())
        elif len(queues) == 1:
            name, params["queue"] = "job_claim_one", queues[0]
        else:
            name, params["queues"] = "job_claim_many", list(queues)
        return self._claimed(name, params)

    def job_claim_alone(self, claim: ClaimAlone) -> list[ClaimedJob]:
        return self._claimed("job_claim_alone", {
            **self._db.now(), "queue": claim.queue, "token": secrets.randbits(63), "worker": claim.identity,
            "lease": claim.lease_ms, "wait": claim.waited_ms,
            "names": None if claim.names is None else sorted(claim.names), "limit": claim.limit})

    def _claimed(self, statement: str, params: dict[str, Any]) -> list[ClaimedJob]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql[statement], params)
            rows = cur.fetchall()
        rows.sort()
        token = params["token"]
        return [ClaimedJob(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[9], r[10]) for r in rows]

    def job_ack_many(self, leases: Sequence[Lease], results: Mapping[int, bytes] | None = None) -> set[int]:
        found = results or {}
        with self._db.cursor() as cur:
            # planned for this batch, never generic (see job_ack_many)
            cur.execute(self._db.sql["job_ack_many"], {
                **self._db.now(), "ids": _int_array(l.job_id for l in leases),
                "tokens": _int_array(l.token for l in leases), "settled": self._db.settled_channel,
                "results": [None if (r := found.get(l.job_id)) is None else r.decode() for l in leases]},
                prepare=False)
            return {r[0] for r in cur.fetchall()}

    def job_nack_many(self, nacks: Sequence[Nack]) -> set[int]:
        """``job_nack_many``: the batch as ONE json document, fenced per job on its token."""
        rows = orjson.dumps([{"id": n.job_id, "token": n.token, "outcome": n.outcome, "error": n.error,
                              "delay": n.delay_ms, "traceback": n.traceback} for n in nacks]).decode()
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_nack_many"], {
                **self._db.now(), "ids": _int_array(n.job_id for n in nacks), "rows": rows}, prepare=False)
            settled = cur.fetchall()
            # a run handed back (a drain, a reload, a lost slot) is due now: wake the queue's
            # idle workers rather than leave it to their poll. Not for a shed, which would
            # wake them to find the same job still held back
            self._db.notify(cur, [(job_id, queue, state) for job_id, queue, state, outcome, delay in settled
                                  if outcome == "interrupted" and delay == 0])
            self._db.settled(cur, [job_id for job_id, _, state, _, _ in settled if state == "dead"])
            return {r[0] for r in settled}

    def job_renew_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_renew_many"], {
                **self._db.now(), "lease": lease_ms,
                "ids": _int_array(l.job_id for l in leases),
                "tokens": _int_array(l.token for l in leases)}, prepare=False)
            return {r[0] for r in cur.fetchall()}

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        rows = orjson.dumps([{"id": r.lease.job_id, "token": r.lease.token, "p": r.as_json()}
                             for r in reports]).decode()
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_progress_many"], {"rows": rows})
            return {r[0] for r in cur.fetchall()}

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease, tenant: str | None = None, cross_tenant: bool = False,
                        result: Callable[[], bytes | None] | None = None) -> Iterator[psycopg.Connection]:
        """A connection in a transaction that, on a clean exit, also completes the job.

        The completion (``job_complete_fenced``) is fenced like an ack: if the lease was lost
        the whole transaction rolls back and ``LeaseLost`` is raised, so the body's writes land
        exactly once. The run's tenant is set first (``job_tenant``), local to the transaction. The driver's
        own statements raise the seam's errors; the body's statements and the commit of its
        writes raise what psycopg raises, as the application's own code would see them.
        """
        with contextlib.ExitStack() as stack:
            with driver_errors():
                conn = stack.enter_context(self._db.body_session())
                stack.enter_context(conn.transaction())
                conn.execute(self._db.sql["job_tenant"], {"run_tenant": tenant or "",
                                                          "cross": "on" if cross_tenant else "off"})
            yield conn
            done = None
            if held(lease):
                with driver_errors():
                    value = None if result is None else result()
                    done = conn.execute(self._db.sql["job_complete_fenced"], {
                        **self._db.now(), "id": lease.job_id, "token": lease.token,
                        "settled": self._db.settled_channel,
                        "result": None if value is None else value.decode()}).fetchone()
            if done is None:
                raise lease_lost(lease)

    def job_listen(self, holder: str | None = None) -> PgListener:
        """A listener whose ``poll()`` answers the queues that got new ready jobs, and whose
        ``cancels()`` the cancels of ``holder``'s running jobs."""
        return PgListener(self._db, holder=holder)
