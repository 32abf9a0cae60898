"""The verbs an application awaits on its own ``AsyncConnection``: ``AsyncWrites``.

An async web handler writes in an ``psycopg.AsyncConnection`` transaction; these verbs join
it, as ``job_enqueue``, ``outbox_stage`` and ``event_send`` join a synchronous ``conn``: every
statement in the caller's transaction (a rollback leaves nothing, nobody sees a row before the
commit), awaited, so the event loop runs other tasks while a statement is at the server. The
Postgres driver awaits the very plans its synchronous verbs run (``pg_plan``), so the two
cannot decide differently; the memory driver has no I/O to await and answers its
synchronous verb, taking only its own transaction (``MemoryTransaction``) as ``conn``.

Without a caller's connection there is nothing of the caller's to join: the API runs the
synchronous verb on a worker thread, through the driver's pool (``xjobs.enqueue``).

``AsyncWrites`` is a declared capability, like ``SlotStore``: both shipped drivers have it, and
a driver without it refuses ``conn=`` of an async verb with ``X_INVALID_OPTION``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, TypeAlias, runtime_checkable

from .records import Enqueued, NewJob
from .records_steps import NewEvent, SentEvent

if TYPE_CHECKING:
    import psycopg

    from .memory_jobs import MemoryTransaction

# a caller's async connection, whose transaction an async verb's ``conn`` joins
AsyncCallerConnection: TypeAlias = "psycopg.AsyncConnection[Any] | MemoryTransaction"


@runtime_checkable
class AsyncWrites(Protocol):
    async def job_enqueue_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[Enqueued]:
        """``job_enqueue`` in ``conn``'s transaction, awaited; a batch of more than
        ``ENQUEUE_CHUNK`` jobs goes in chunks, all of it or none (a savepoint)."""
        ...

    async def outbox_stage_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[int]:
        """``outbox_stage`` in ``conn``'s transaction, awaited."""
        ...

    async def event_send_async(self, event: NewEvent, conn: AsyncCallerConnection) -> SentEvent:
        """``event_send`` in ``conn``'s (read committed) transaction, awaited."""
        ...


__all__ = ["AsyncCallerConnection", "AsyncWrites"]
