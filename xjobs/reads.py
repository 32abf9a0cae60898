"""A job's state and the queues', read from the database now: ``xjobs.get``, ``xjobs.aget``,
``xjobs.queues``, and ``Enqueued.get()``/``Enqueued.aget()`` on what enqueue answers.

    job = send_receipt.enqueue({"order": 42})
    job.get()["state"]                   # 'ready', then 'running', 'completed', ...
    xjobs.get(job.id)["attempt"]
    xjobs.get(job.id, conn=session)      # in your transaction: a SQLAlchemy Session, or psycopg's
    await xjobs.aget(job.id, conn=aconn)   # awaited on your AsyncConnection (or AsyncSession)

What they answer is what ``xjobsd jobs show --json`` and ``xjobsd queues ls --json`` print,
projected once (``views.py``): plain JSON with ISO-8601 times in UTC. An unknown id is
refused with ``JobNotFound`` (``X_JOB_NOT_FOUND``), as the command line refuses it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import psycopg

from .config import current_driver
from .connections import AsyncJoinable, Joinable, ajoined, joined
from .drivers.base import Introspection, QueueStore
from .drivers.records import Enqueued as EnqueuedRecord
from .errors import InvalidOption
from .drivers.settlement import SettlementWaits
from .registry import REGISTRY, Registry
from .results import aresult, result
from .views import plain, queues as queue_rows, shown

if TYPE_CHECKING:
    from .drivers.postgres import PostgresDriver


class Enqueued(EnqueuedRecord):
    """What ``enqueue`` answers: the job's ``id``, and ``deduped`` (a job already held its
    idempotency key: ``id`` is that job's), and ``debounced`` (that job had not started and
    took this input and a later start: ``job(debounce=)``). ``get()`` and ``aget()`` read its state now;
    ``result()`` and ``aresult()`` wait for what its body returns (``results.py``)."""

    __slots__ = ()

    # equal to the driver's record of the same job: the handle adds ways to read, not a value
    def __eq__(self, other: object) -> bool:
        if isinstance(other, EnqueuedRecord):
            return (self.id, self.deduped, self.debounced) == (other.id, other.deduped, other.debounced)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.id, self.deduped, self.debounced))   # as the record's own (a frozen dataclass) hashes

    def get(self, *, conn: Joinable | None = None,
            driver: Introspection | None = None) -> dict[str, Any]:
        """``xjobs.get(self.id, ...)``."""
        return get(self.id, conn=conn, driver=driver)

    async def aget(self, *, conn: AsyncJoinable | None = None,
                   driver: Introspection | None = None) -> dict[str, Any]:
        """``await xjobs.aget(self.id, ...)``."""
        return await aget(self.id, conn=conn, driver=driver)

    def result(self, timeout: float | None = None, *, driver: SettlementWaits | None = None) -> Any:
        """``xjobs.result(self.id, timeout)``: what the body returned, once it did."""
        return result(self.id, timeout, driver=driver)

    async def aresult(self, timeout: float | None = None, *, driver: SettlementWaits | None = None) -> Any:
        """``await xjobs.aresult(self.id, timeout)``."""
        return await aresult(self.id, timeout, driver=driver)


def get(job_id: int, *, conn: Joinable | None = None,
        driver: Introspection | None = None) -> dict[str, Any]:
    """The job ``job_id`` as ``xjobsd jobs show --json`` prints it: ``state``, ``attempt`` of
    ``max_attempts``, ``progress``, ``last_error``, ``history`` (every attempt's outcome, with
    its traceback), ``steps`` (without their results), ``waiting_for`` (the sleep or event
    a suspended job waits for) and ``result`` (what a completed job's body returned; to wait
    for it, ``xjobs.result``), read now through the configured driver (or ``driver``).

    With ``conn=`` (your psycopg connection, or a SQLAlchemy ``Session`` or ``Connection`` on a
    psycopg engine: ``connections.py``) the read runs on it, in your transaction: a job you
    enqueued with ``conn=`` and have not committed yet is found. ``JobNotFound`` when no job
    has that id (it never existed, or retention pruned it)."""
    store = driver if driver is not None else current_driver()
    callers = joined(conn, "get")
    if callers is None:
        return shown(store.job_get(job_id))
    return shown(_postgres(store, "get").job_get(job_id, callers))


async def aget(job_id: int, *, conn: AsyncJoinable | None = None,
               driver: Introspection | None = None) -> dict[str, Any]:
    """``get``, awaited. With ``conn=`` (your psycopg ``AsyncConnection``, say from your
    framework's pool, or a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``) the same
    statements are awaited on it, in your transaction.

    Without one the read is ``get`` on a worker thread (``asyncio.to_thread``), through the
    driver's pool: its pooled connections are synchronous, and a pool of async ones belongs
    to the event loop that opened it, which a process-wide driver cannot know; opening a
    connection for each read would cost more than the read."""
    store = driver if driver is not None else current_driver()
    if conn is None:
        return await asyncio.to_thread(get, job_id, driver=store)
    callers = await ajoined(conn, "aget")
    if not isinstance(callers, psycopg.AsyncConnection):
        raise InvalidOption("conn", f"aget reads on a psycopg AsyncConnection, got {type(conn).__name__}; "
                                    "xjobs.get takes a synchronous one")
    return shown(await _postgres(store, "aget").job_get_async(job_id, callers))


def queues(*, driver: QueueStore | None = None, registry: Registry | None = None) -> list[dict[str, Any]]:
    """Every queue this process declares (the jobs of ``registry``, by default the one
    ``@xjobs.job`` fills), with live jobs, or paused, as ``xjobsd queues ls --json`` prints it
    for the same app: ``paused`` (and ``paused_by``), ``depth`` and ``oldest_ready_seconds`` of
    its due ready jobs, how many are ``ready``, ``running``, ``suspended``, ``dead`` and
    ``quarantined``, and ``waiting``: the live jobs that wait, by reason (``key``, ``sequence``,
    ``rate``, ``snoozed``, ``scheduled``), read now."""
    store = driver if driver is not None else current_driver()
    declared = tuple((registry if registry is not None else REGISTRY).queues())
    rows: list[dict[str, Any]] = plain(queue_rows(store, declared))   # as --json prints them, through the same plain()
    return rows


def _postgres(driver: object, verb: str) -> PostgresDriver:
    from .drivers.postgres import PostgresDriver
    if not isinstance(driver, PostgresDriver):
        raise InvalidOption("conn", f"{verb}(conn=) reads on a PostgreSQL connection of yours; "
                                    f"this driver is {type(driver).__name__}: leave conn out")
    return driver
