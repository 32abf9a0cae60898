"""The Postgres driver's ``OutboxStore``, the transactional outbox: stage in the caller's transaction, claim a
batch as a lease, publish it (enqueue + mark) in one transaction fenced on the claim.

The claim's token is the fence of every mutation after the claim: a relay that stalled past
its lease finds its token replaced by the next claimant's, so its publish marks no row (and
the transaction, enqueue included, rolls back) and its release hands nothing back.
"""

from __future__ import annotations

import secrets
from typing import Sequence

import orjson

from .base import CallerConnection, Enqueued, JobListener, NewJob, OutboxClaim, OutboxStore, OutboxSummary
from .pg_database import PgDatabase, first_row
from .pg_jobs import PgJobs
from .pg_listen import PgListener
from .pg_plan import Plan, run_on


class _Fenced(Exception):
    """Rolls a publish back: some row of the batch is no longer this claim's."""


def _int_array(values: Sequence[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def stage_plan(db: PgDatabase, jobs: Sequence[NewJob]) -> Plan[list[int]]:
    """``outbox_stage``: the batch in one statement (``pg_plan``); answers the rows' ids."""
    staged = yield "outbox_stage", {**db.now(), "rows": orjson.dumps([job.document() for job in jobs]).decode()}
    return [row[0] for row in staged]


class PgOutbox(OutboxStore):
    def __init__(self, db: PgDatabase, jobs: PgJobs) -> None:
        self._db = db
        self._jobs = jobs

    @property
    def channel(self) -> str:
        return f"{self._db.channel}_outbox"

    def outbox_stage(self, jobs: Sequence[NewJob], conn: CallerConnection | None) -> list[int]:
        with self._db.cursor(conn) as cur:
            return run_on(cur, self._db.sql, stage_plan(self._db, jobs))

    def outbox_listen(self) -> JobListener:
        return PgListener(self._db, self.channel)

    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim:
        token = secrets.randbits(63)
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["outbox_claim"], {**self._db.now(), "token": token, "holder": holder,
                                                       "limit": limit, "lease": lease_ms})
            rows = cur.fetchall()
        return OutboxClaim(token, holder, tuple(r[0] for r in rows),
                           tuple(NewJob.from_document(r[1]) for r in rows))

    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None:
        db = self._db
        try:
            with db.connection() as conn, conn.transaction():
                with conn.cursor() as cur:
                    cur.execute(db.sql["outbox_hold"], {"token": claim.token, "ids": _int_array(claim.ids)})
                    if len(cur.fetchall()) != len(claim.ids):
                        raise _Fenced()     # nothing enqueued: not even a sequence value spent
                results = self._jobs.job_enqueue(claim.jobs, conn)
                with conn.cursor() as cur:
                    cur.execute(db.sql["outbox_publish"], {
                        **db.now(), "token": claim.token, "ids": _int_array(claim.ids),
                        "job_ids": _int_array([r.id for r in results])})
                    if len(cur.fetchall()) != len(claim.ids):
                        raise _Fenced()
                return results
        except _Fenced:
            return None

    def outbox_release(self, claim: OutboxClaim) -> int:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["outbox_release"], {"token": claim.token, "ids": _int_array(claim.ids)})
            return len(cur.fetchall())

    def outbox_prune(self, retention_ms: float, limit: int) -> int:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["outbox_prune"], {**self._db.now(), "retention": retention_ms,
                                                       "limit": limit})
            return int(first_row(cur)[0])

    def outbox_summary(self) -> OutboxSummary:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["outbox_summary"], self._db.now())
            pending, oldest = first_row(cur)
            return OutboxSummary(int(pending), float(oldest))
