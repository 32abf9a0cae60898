"""The transactional outbox: stage a job in YOUR transaction; it is enqueued only if that
transaction commits, and then exactly once.

    with conn.transaction():
        conn.execute("insert into orders ...")
        xjobs.outbox.stage(conn, send_receipt, {"order": 42, "org": "acme"})

``stage`` writes one row to the outbox table on ``conn`` (your psycopg connection, inside
your transaction; None: in a transaction of its own, and the memory driver has no other);
``stage_many`` writes a batch in one statement. Everything ``enqueue``
would refuse is refused here, before anything is written. The daemon's ``outbox-relay``
child wakes on the insert's notification, claims staged rows as a lease, enqueues them
through the one enqueue path and marks them published in one transaction: a committed row
becomes exactly one job, a rolled-back one never exists. It differs from
``handle.enqueue(input, conn=...)``, which also joins your transaction, in that the job row
is written by the relay, later, so the staging transaction touches only the outbox table
(no lock on the jobs table, no trigger on it, whatever the queue's load).

``await xjobs.outbox.astage(aconn, job, input)`` (and ``astage_many``) stage on your psycopg
``AsyncConnection`` or SQLAlchemy ``AsyncSession``, in its transaction; ``conn`` of ``stage``
may be a SQLAlchemy ``Session`` as well.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterable

from .config import current_driver, current_settings
from .connections import AsyncJoinable, Joinable, ajoined, async_writes, joined
from .drivers.base import OutboxStore
from .enqueue import abuild_jobs, build_jobs

if TYPE_CHECKING:
    from .registry import JobHandle


def stage(conn: Joinable | None, job: "JobHandle", input: Any, *, delay: object = None,
          run_at: object = None, priority: int | None = None, enqueued_by: str | None = None,
          driver: OutboxStore | None = None) -> int:
    """Stage one job in ``conn``'s transaction; answers the outbox row's id."""
    return stage_many(conn, job, [input], delay=delay, run_at=run_at, priority=priority,
                      enqueued_by=enqueued_by, driver=driver)[0]


def stage_many(conn: Joinable | None, job: "JobHandle", inputs: Iterable[Any], *,
               delay: object = None, run_at: object = None, priority: int | None = None,
               enqueued_by: str | None = None, driver: OutboxStore | None = None) -> list[int]:
    """Stage a batch in one statement in ``conn``'s transaction; answers the rows' ids."""
    callers = joined(conn, "stage")
    store: OutboxStore = driver if driver is not None else current_driver()
    jobs = build_jobs(job, list(inputs), delay=delay, run_at=run_at, priority=priority,
                      enqueued_by=enqueued_by, max_payload_bytes=current_settings().max_payload_bytes)
    return store.outbox_stage(jobs, callers) if jobs else []


async def astage(conn: AsyncJoinable | None, job: "JobHandle", input: Any, *, delay: object = None,
                 run_at: object = None, priority: int | None = None, enqueued_by: str | None = None,
                 driver: OutboxStore | None = None) -> int:
    """``stage``, awaited on ``conn`` (an ``AsyncConnection`` or ``AsyncSession``)."""
    return (await astage_many(conn, job, [input], delay=delay, run_at=run_at, priority=priority,
                              enqueued_by=enqueued_by, driver=driver))[0]


async def astage_many(conn: AsyncJoinable | None, job: "JobHandle", inputs: Iterable[Any], *,
                      delay: object = None, run_at: object = None, priority: int | None = None,
                      enqueued_by: str | None = None, driver: OutboxStore | None = None) -> list[int]:
    """``stage_many``, awaited on ``conn`` in its transaction; without one, ``stage_many`` on a
    worker thread (see ``xjobs.enqueue.aenqueue_many`` for why a thread)."""
    store: OutboxStore = driver if driver is not None else current_driver()
    if conn is None:
        return await asyncio.to_thread(stage_many, None, job, list(inputs), delay=delay, run_at=run_at,
                                       priority=priority, enqueued_by=enqueued_by, driver=store)
    callers = await ajoined(conn, "astage")
    writes = async_writes(store)
    jobs = await abuild_jobs(job, list(inputs), delay=delay, run_at=run_at, priority=priority,
                             enqueued_by=enqueued_by)
    return await writes.outbox_stage_async(jobs, callers) if jobs else []
