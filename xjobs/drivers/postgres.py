"""The production driver: psycopg 3, two small connection pools, server-side prepared statements.

``PostgresDriver`` is a ``CheckedDriver`` (``facade.py``: every verb checks its arguments,
then calls one collaborator) built over one ``PgDatabase`` (``pg_database.py``: the pools,
the rendered statements of ``queries.sql``, the ``now`` parameter, notify) shared by the
objects that do the work:

    pg_jobs.PgJobs                 enqueue, claim, ack, nack, heartbeat, progress, transaction, listen
    pg_maintenance.PgMaintenance   rescue lapsed leases, release a dead worker's jobs, prune
    pg_operator.PgOperator         list, get, cancel, requeue (one and in batches), count
    pg_queues.PgQueues             pause, control, summary, counts, stats
    pg_schedule.PgSchedule         the leader lease row, cron watermarks, a task's dispatch
    pg_outbox.PgOutbox             stage, claim as a lease, publish in one transaction, release
    pg_slots.PgSlots               fleet-wide job slots: acquire, renew, release

Time: a driver built without ``clock=`` takes "now" in every statement from the server, so
every worker measures leases and due times on the one clock they are compared on; one built
with ``clock=`` (the test suites) binds that clock's reading instead (see ``pg_database``).

What only this driver has, beyond the seam: ``connect()`` (a dedicated connection configured
like the pool's, for LISTEN, migrations and tests that read the tables) and ``database``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..clock import Clock
from .facade import CheckedDriver
from .pg_database import PgDatabase
from .pg_jobs import PgJobs
from .pg_maintenance import PgMaintenance
from .pg_operator import PgOperator
from .pg_outbox import PgOutbox
from .pg_queues import PgQueues
from .pg_schedule import PgSchedule
from .pg_slots import PgSlots
from .pg_steps import PgSteps


class PostgresDriver(CheckedDriver):
    def __init__(self, dsn: str, *, schema: str = "xjobs", clock: Clock | None = None,
                 pool_size: int = 4, transaction_pool_size: int = 16, pool_timeout: float = 30.0,
                 application_name: str = "xjobs", statement_timeout_ms: int | None = None) -> None:
        """``pool_timeout``: seconds a verb waits for a free pooled connection (or for the
        server to answer at all) before ``PoolTimeout``; a CLI can ask for less.
        ``statement_timeout_ms``: a server-side cap on every statement of the driver's own
        verbs (a worker loop must not hang on a locked table longer than its supervisor
        waits for it); never applied to ``job_transaction``, whose statements are the app's."""
        self.database = PgDatabase(
            dsn, schema=schema, clock=clock, pool_size=pool_size,
            transaction_pool_size=transaction_pool_size, pool_timeout=pool_timeout,
            application_name=application_name, statement_timeout_ms=statement_timeout_ms)
        db = self.database
        jobs = PgJobs(db)
        super().__init__(storage=db, jobs=jobs, maintenance=PgMaintenance(db), operator=PgOperator(db),
                         queues=PgQueues(db), schedule=PgSchedule(db, jobs), outbox=PgOutbox(db, jobs),
                         slots=PgSlots(db), steps=PgSteps(db))

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
