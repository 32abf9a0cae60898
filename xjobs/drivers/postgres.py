"""The production driver: psycopg 3, three small connection pools, server-side prepared statements.

``PostgresDriver`` is a ``CheckedDriver`` (``facade.py``: every verb checks its arguments,
then calls the method of the same name on one of the objects below) built over one
``PgDatabase`` (``pg_database.py``: the pools, the rendered statements of ``queries.sql``, the
``now`` parameter, notify, the driver's errors), which every one of them shares:

    pg_jobs.PgJobs                 JobStore: enqueue, claim, ack, nack, renew, progress, transaction
    pg_maintenance.PgMaintenance   Maintenance: rescue lapsed leases, release a dead worker's jobs, prune
    pg_operator.PgOperator         Introspection: list, get, cancel, requeue, retry from a step, count
    pg_queues.PgQueues             QueueStore: pause, control, summary, counts, stats, rates
    pg_schedule.PgSchedule         LeaderStore, ScheduleStore: the leader row, watermarks, dispatch
    pg_outbox.PgOutbox             OutboxStore: stage, claim as a lease, publish in one transaction
    pg_slots.PgSlots               SlotStore: fleet-wide job slots: acquire, renew, release
    pg_steps.PgSteps               StepStore, EventStore: durable steps and stored events
    pg_ledger.PgLedger             BackfillLedger (optional, ``driver.backfills``): the backfill runs
    pg_fanins.PgFanIns             FanInStore (optional, ``driver.fanins``): child jobs, map, batches
    pg_fair.PgFair                 FairClaims (optional, ``driver.fair``): claims shared out by key
    pg_rate_keys.PgRateKeys        RateKeyStore (optional, ``driver.rate_keys``): job(rate=...) by key
    pg_async.PgAsyncWrites         AsyncWrites: enqueue, stage, send awaited on an AsyncConnection

Time: a driver built without ``clock=`` takes "now" in every statement from the server, so
every worker measures leases and due times on the one clock they are compared on; one built
with ``clock=`` (the test suites) binds that clock's reading instead (see ``pg_database``).

What only this driver has, beyond the seam: ``connect()`` (a dedicated connection configured
like the pool's, for LISTEN, migrations and tests that read the tables), ``database``, and
``job_get`` on the application's own connection, sync or async (``xjobs.get(conn=)``,
``xjobs.aget(conn=)``).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..clock import Clock
from .base import CallerConnection, JobView
from .facade import CheckedDriver
from .pg_async import PgAsyncWrites
from .pg_database import PgDatabase
from .pg_fair import PgFair
from .pg_fanins import PgFanIns
from .pg_jobs import PgJobs
from .pg_ledger import PgLedger
from .pg_settlement import PgSettlement
from .pg_maintenance import PgMaintenance
from .pg_operator import PgOperator
from .pg_outbox import PgOutbox
from .pg_queues import PgQueues
from .pg_rate_keys import PgRateKeys
from .pg_schedule import PgSchedule
from .pg_slots import PgSlots
from .pg_steps import PgSteps
from .refusals import is_bigint, job_not_found


class PostgresDriver(CheckedDriver):
    def __init__(self, dsn: str, *, schema: str = "xjobs", clock: Clock | None = None,
                 pool_size: int = 4, step_pool_size: int = 2, transaction_pool_size: int = 16,
                 pool_timeout: float = 30.0, application_name: str = "xjobs",
                 statement_timeout_ms: int | None = None) -> None:
        """The pools (``pg_database``): ``pool_size`` connections for the driver's own verbs,
        ``step_pool_size`` for the step statements of every run, and up to
        ``transaction_pool_size`` for bodies in ``ctx.transaction()``, one each while open.
        ``pool_timeout``: seconds a verb waits for a free pooled connection (or for the
        server to answer at all) before ``DatabaseUnavailable``; a CLI can ask for less.
        ``statement_timeout_ms``: a server-side cap on every statement of the driver's own
        verbs (a worker loop must not hang on a locked table longer than its supervisor
        waits for it); never applied to ``job_transaction``, whose statements are the app's."""
        self.database = PgDatabase(
            dsn, schema=schema, clock=clock, pool_size=pool_size, step_pool_size=step_pool_size,
            transaction_pool_size=transaction_pool_size, pool_timeout=pool_timeout,
            application_name=application_name, statement_timeout_ms=statement_timeout_ms)
        db = self.database
        jobs, steps = PgJobs(db), PgSteps(db)
        self._reads = operator = PgOperator(db)
        schedule = PgSchedule(db, jobs)
        super().__init__(storage=db, jobs=jobs, maintenance=PgMaintenance(db), operator=operator,
                         queues=PgQueues(db), leader=schedule, schedule=schedule, outbox=PgOutbox(db, jobs),
                         slots=PgSlots(db), steps=steps, events=steps,
                         writes_async=PgAsyncWrites(db), backfills=PgLedger(db), waits=PgSettlement(db),
                         fanins=PgFanIns(db), fair=PgFair(db),
                         rate_keys=PgRateKeys(db))

    @property
    def dsn(self) -> str:
        return self.database.dsn

    @property
    def schema(self) -> str:
        return self.database.schema

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel new ready jobs are announced on."""
        return self.database.channel

    @property
    def application_name(self) -> str:
        return self.database.application_name

    def connect(self, **extra: Any) -> psycopg.Connection:
        """A fresh dedicated connection, configured like the pool's; the caller closes it."""
        return self.database.connect(**extra)

    def job_get(self, job_id: int, conn: CallerConnection | None = None) -> JobView:
        """``job_get``; with ``conn`` (a psycopg connection of the application's) its statements
        run on it, in its transaction, as statements of its own would."""
        if conn is None:
            return super().job_get(job_id)
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return self._reads.job_get(job_id, conn)

    async def job_get_async(self, job_id: int, conn: psycopg.AsyncConnection[Any]) -> JobView:
        """``job_get``'s statements awaited on the application's ``AsyncConnection``."""
        if not is_bigint(job_id):
            raise job_not_found(job_id)
        return await self._reads.job_get_async(conn, job_id)
