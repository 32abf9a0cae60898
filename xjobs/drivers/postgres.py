"""The production driver: psycopg 3, two small connection pools, server-side prepared statements.

Every statement comes from ``queries.sql`` (see ``sql.py``); this module only binds
parameters and shapes results. The pools open lazily on first use, so a supervisor that
builds a driver before forking holds no connection across the fork. The verbs share one
pool; ``job_transaction`` draws from its own, because a body holds its connection for as long
as it runs, and bodies holding the verbs' pool would starve the claim, ack and heartbeat
that keep their own leases alive.

Time: a driver built without ``clock=`` takes "now" in every statement from the server
(``statement_timestamp()``), so a worker whose wall clock runs ahead can neither rescue
another machine's live lease nor make a delayed job due early. One built with ``clock=`` (the
test suites) binds that clock's reading as now instead, so tests step time by hand.
``clock`` stays available to callers either way, for coarse local decisions (prune cutoffs).

Fences: ``ack``, ``nack`` and ``heartbeat`` match ``state = 'running'`` AND the claim's
``lease_token``. A worker that lost its lease (rescued, cancelled, released) matches no row,
so it can never overwrite the state of a job somebody else now runs.
"""

from __future__ import annotations

import contextlib
import math
import threading
import secrets
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import orjson
import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from ..clock import SYSTEM_CLOCK, Clock
from ..errors import LeaseLost, XJobsError
from ..options import duration_ms, finite_count, finite_option
from .base import (ClaimedJob, Enqueued, Lease, Nack, NewJob, Progress, Released, check_charge,
                   check_claim, check_new_jobs, check_row_limit, is_bigint)
from .pg_inspect import InspectMixin
from .pg_install import install
from .sql import check_schema_name, notify_channel, statements

if TYPE_CHECKING:
    from .pg_listen import PgListener

# Every connection the driver opens gives up on an unreachable server after connect_timeout
# seconds, and TCP keepalives notice a peer that vanished (a failed-over primary, a dropped
# NAT entry) within about idle + interval * count = 25 s instead of the kernel's two hours.
CONNECT_OPTIONS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 10,
                   "keepalives_interval": 5, "keepalives_count": 3}


def _configure(conn: psycopg.Connection) -> None:
    set_json_loads(orjson.loads, conn)


def _matchable(leases: Sequence[Lease]) -> list[Lease]:
    """The leases a ``bigint`` fence can match; any other id or token is held by nobody."""
    return [l for l in leases if is_bigint(l.job_id) and is_bigint(l.token)]


def _int_array(values: Iterable[int]) -> str:
    """A bigint[] literal: joining digits is far cheaper than binding an array per element
    (values are checked integers, so the literal cannot carry anything else)."""
    return "{" + ",".join(map(str, values)) + "}"


class PostgresDriver(InspectMixin):
    def __init__(self, dsn: str, *, schema: str = "xjobs", clock: Clock | None = None,
                 pool_size: int = 4, transaction_pool_size: int = 16, pool_timeout: float = 30.0,
                 application_name: str = "xjobs", statement_timeout_ms: int | None = None) -> None:
        """``pool_timeout``: seconds a verb waits for a free pooled connection (or for the
        server to answer at all) before ``PoolTimeout``; a CLI can ask for less.
        ``statement_timeout_ms``: a server-side cap on every statement of the driver's own
        verbs (a worker loop must not hang on a locked table longer than its supervisor
        waits for it); never applied to ``job_transaction``, whose statements are the app's."""
        self.dsn = dsn
        self.schema = check_schema_name(schema)
        self.server_clock = clock is None
        self.clock: Clock = SYSTEM_CLOCK if clock is None else clock
        self.channel = notify_channel(self.schema)
        self.application_name = application_name
        self._sql = statements(self.schema, self.server_clock)
        self._pool_size = finite_count(pool_size, "pool_size", minimum=1, maximum=1000)
        self._transaction_pool_size = finite_count(transaction_pool_size, "transaction_pool_size",
                                                   minimum=1, maximum=1000)
        self._pool_timeout = finite_option(pool_timeout, "pool_timeout", maximum=3600.0,
                                           exclusive_minimum=True)
        self._statement_timeout_ms = None if statement_timeout_ms is None else finite_count(
            statement_timeout_ms, "statement_timeout_ms", minimum=1, maximum=86_400_000)
        self._pool: ConnectionPool | None = None
        self._transaction_pool: ConnectionPool | None = None
        self._pool_lock = threading.Lock()

    def _now(self) -> dict[str, float]:
        """The ``now`` parameter of a statement: none when the server's clock is now."""
        return {} if self.server_clock else {"now": self.clock.now_ms()}

    # -- connections -------------------------------------------------------------------------

    def _options(self, capped: bool = True) -> dict[str, Any]:
        options = {"autocommit": True, "prepare_threshold": 0,
                   "application_name": self.application_name, **CONNECT_OPTIONS}
        if capped and self._statement_timeout_ms is not None:
            options["options"] = f"-c statement_timeout={self._statement_timeout_ms}"
        return options

    def connect(self, **extra: Any) -> psycopg.Connection:
        """A fresh dedicated connection (LISTEN, migrations), configured like the pool's."""
        conn = psycopg.connect(self.dsn, **{**self._options(), **extra})
        _configure(conn)
        return conn

    def _open_pool(self, slot: str, size: int, label: str, capped: bool = True) -> ConnectionPool:
        pool = getattr(self, slot)
        if pool is None:
            with self._pool_lock:
                pool = getattr(self, slot)
                if pool is None:
                    pool = ConnectionPool(
                        self.dsn, min_size=1, max_size=size, open=True,
                        timeout=self._pool_timeout, kwargs=self._options(capped),
                        configure=_configure, name=f"xjobs-{label}-{self.application_name}")
                    setattr(self, slot, pool)
        return pool

    def _connection(self) -> contextlib.AbstractContextManager[psycopg.Connection]:
        return self._open_pool("_pool", self._pool_size, "verbs").connection()

    @contextlib.contextmanager
    def _cursor(self, conn: Any = None) -> Iterator[psycopg.Cursor]:
        if conn is not None:
            # the application's connection may hand rows back as dicts or objects; every
            # statement here reads its columns by position
            with conn.cursor(row_factory=tuple_row) as cur:
                yield cur
            return
        with self._connection() as own, own.cursor() as cur:
            yield cur

    def job_listen(self) -> "PgListener":
        """A listener whose ``poll()`` answers the queues that got new ready jobs."""
        from .pg_listen import PgListener
        return PgListener(self)

    def close(self) -> None:
        with self._pool_lock:
            pools = (self._pool, self._transaction_pool)
            self._pool = self._transaction_pool = None
        for pool in pools:
            if pool is not None:
                pool.close()

    def migrate(self, *, lock_timeout_ms: float = 10_000.0) -> None:
        """Install or upgrade the schema (see ``pg_install``); safe from many processes at once,
        and a read without a table lock when the schema is current."""
        timeout = finite_option(lock_timeout_ms, "migrate.lock_timeout", exclusive_minimum=True)
        with self.connect(prepare_threshold=None) as conn:
            install(conn, self.schema, timeout)

    # -- the queue ---------------------------------------------------------------------------

    def job_enqueue(self, jobs: Sequence[NewJob], conn: Any = None) -> list[Enqueued]:
        check_new_jobs(jobs)
        if not jobs:
            return []
        results: list[Enqueued | None] = [None] * len(jobs)
        spaces = [job.namespace for job in jobs]
        pending = list(range(len(jobs)))
        with self._cursor(conn) as cur:
            for _round in range(4):
                batch = [jobs[i] for i in pending]
                rows = orjson.dumps([{
                    "n": j.name, "q": j.queue, "p": orjson.Fragment(j.payload), "k": j.idempotency_key,
                    "t": j.tenant, "e": j.enqueued_by, "pr": j.priority, "m": j.max_attempts,
                    "r": j.run_at_ms, "d": j.delay_ms, "w": j.dedupe_window_ms} for j in batch])
                cur.execute(self._sql["job_enqueue"], {**self._now(), "rows": rows.decode()})
                inserted = {(r[1], r[2], r[3]): r[0] for r in cur.fetchall()}
                # an input whose namespace went in answers that row; a second input with the
                # same namespace (pop leaves nothing) is a duplicate of it, found below
                missing = []
                for i in pending:
                    job_id = inserted.pop(spaces[i], None)
                    if job_id is None:
                        missing.append(i)
                    else:
                        results[i] = Enqueued(job_id, False)
                if not missing:
                    return results  # type: ignore[return-value]
                wanted = sorted({spaces[i] for i in missing})
                keys = orjson.dumps([{"n": n, "t": t, "k": k} for n, t, k in wanted]).decode()
                cur.execute(self._sql["job_find_holder"], {**self._now(), "keys": keys})
                live: dict[tuple[str, str, str], int] = {}
                for r in cur.fetchall():   # live holders come first: keep the first per namespace
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

    def job_claim(self, queues: Sequence[str], limit: int, lease_ms: float,
                  worker_id: str) -> list[ClaimedJob]:
        queues, limit, lease_ms = check_claim(queues, limit, lease_ms)
        if limit == 0:
            return []
        token = secrets.randbits(63)
        params: dict[str, Any] = {**self._now(), "limit": limit, "token": token,
                                  "worker": worker_id, "lease": lease_ms}
        if len(queues) == 1:
            name, params["queue"] = "job_claim_one", queues[0]
        else:
            name, params["queues"] = "job_claim_many", queues
        return self._claimed(name, params)

    def job_claim_alone(self, queue: str, lease_ms: float, worker_id: str,
                        waited_ms: float = 0.0) -> list[ClaimedJob]:
        [queue], _, lease_ms = check_claim([queue], 1, lease_ms)
        waited = duration_ms(waited_ms, "claim.waited")
        return self._claimed("job_claim_alone", {
            **self._now(), "queue": queue, "token": secrets.randbits(63), "worker": worker_id,
            "lease": lease_ms, "wait": waited})

    def _claimed(self, statement: str, params: dict[str, Any]) -> list[ClaimedJob]:
        with self._cursor() as cur:
            cur.execute(self._sql[statement], params)
            rows = cur.fetchall()
        rows.sort()
        token = params["token"]
        return [ClaimedJob(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token) for r in rows]

    def job_ack_many(self, leases: Sequence[Lease]) -> set[int]:
        leases = _matchable(leases)
        if not leases:
            return set()
        with self._cursor() as cur:
            cur.execute(self._sql["job_ack_many"], {
                **self._now(), "ids": _int_array(l.job_id for l in leases),
                "tokens": _int_array(l.token for l in leases)})
            return {r[0] for r in cur.fetchall()}

    def job_ack(self, job_id: int, token: str) -> bool:
        return job_id in self.job_ack_many([Lease(job_id, token)])

    def job_nack(self, nack: Nack) -> bool:
        delay = finite_option(nack.delay_ms, "nack.delay", minimum=-math.inf)
        if not _matchable([Lease(nack.job_id, nack.token)]):
            return False
        with self._cursor() as cur:
            cur.execute(self._sql["job_nack"], {
                **self._now(), "id": nack.job_id, "token": nack.token,
                "dead": nack.dead, "park": nack.park, "counts": nack.counts_as_attempt,
                "delay": delay, "error": nack.error, "outcome": nack.outcome})
            return cur.fetchone() is not None

    def job_heartbeat_many(self, leases: Sequence[Lease], lease_ms: float) -> set[int]:
        lease_ms = duration_ms(lease_ms, "heartbeat.lease", exclusive_minimum=True)
        leases = _matchable(leases)
        if not leases:
            return set()
        with self._cursor() as cur:
            cur.execute(self._sql["job_heartbeat_many"], {
                **self._now(), "lease": lease_ms,
                "ids": _int_array(l.job_id for l in leases),
                "tokens": _int_array(l.token for l in leases)})
            return {r[0] for r in cur.fetchall()}

    def job_heartbeat(self, job_id: int, token: str, lease_ms: float) -> bool:
        return job_id in self.job_heartbeat_many([Lease(job_id, token)], lease_ms)

    def job_rescue(self, limit: int = 1000) -> int:
        limit = check_row_limit(limit, "rescue.limit")
        params = {**self._now(), "limit": limit}
        with self._cursor() as cur:
            cur.execute(self._sql["job_rescue_lapsed"], params)
            moved = cur.fetchall()
            cur.execute(self._sql["job_wake_due"], params)
            moved += cur.fetchall()
            self._wake(cur, moved)
            return len(moved)

    def _wake(self, cur: psycopg.Cursor, rows: Sequence[Sequence[Any]]) -> None:
        """Notify the queues of rows (id, queue, state) that came back to ready."""
        queues = sorted({queue for _, queue, state in rows if state == "ready"})
        if queues:
            cur.execute(self._sql["queue_notify"], {"channel": self.channel, "queues": queues})

    def job_release_worker(self, worker_id: str, *, crashed: bool = True, how: str = "died",
                           charge: str = "alone") -> list[Released]:
        charge = check_charge(charge)
        with self._cursor() as cur:
            cur.execute(self._sql["job_release_worker"], {**self._now(), "worker": worker_id,
                                                          "crashed": bool(crashed), "how": how,
                                                          "charge": charge})
            released = [Released(*row) for row in cur.fetchall()]
            self._wake(cur, [(r.id, r.queue, r.state) for r in released])
            return released

    def session_count(self, application_name: str) -> int:
        """Open sessions announcing ``application_name`` (a child's identity) in this database."""
        with self._cursor() as cur:
            cur.execute(self._sql["session_count"], {"application_name": application_name})
            return cur.fetchone()[0]

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        limit = check_row_limit(limit, "prune.limit")
        completed_for = duration_ms(completed_for_ms, "prune.completed_for")
        finished_for = duration_ms(finished_for_ms, "prune.finished_for")
        with self._cursor() as cur:
            cur.execute(self._sql["job_prune"], {**self._now(), "completed_for": completed_for,
                                                 "finished_for": finished_for, "limit": limit})
            return cur.fetchone()[0]

    def job_progress_many(self, reports: Sequence[Progress]) -> set[int]:
        reports = [r for r in reports if _matchable([r.lease])]
        if not reports:
            return set()
        rows = orjson.dumps([{"id": r.lease.job_id, "token": r.lease.token, "p": r.as_json()}
                             for r in reports]).decode()
        with self._cursor() as cur:
            cur.execute(self._sql["job_progress_many"], {"rows": rows})
            return {r[0] for r in cur.fetchall()}

    @contextlib.contextmanager
    def job_transaction(self, lease: Lease) -> Iterator[psycopg.Connection]:
        """A connection in a transaction that, on a clean exit, also completes the job.

        The completion is fenced like ``ack``: if the lease was lost the whole transaction
        rolls back and ``LeaseLost`` is raised, so the body's writes land exactly once.
        """
        pool = self._open_pool("_transaction_pool", self._transaction_pool_size, "bodies", capped=False)
        with pool.connection() as conn:
            with conn.transaction():
                yield conn
                done = None
                if _matchable([lease]):
                    done = conn.execute(self._sql["job_complete_fenced"], {
                        **self._now(), "id": lease.job_id, "token": lease.token}).fetchone()
                if done is None:
                    raise LeaseLost(f"job {lease.job_id} is no longer held by this worker; rolled back")
