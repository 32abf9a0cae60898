"""The memory driver's ``AsyncWrites``: nothing to await, so each verb is its synchronous
verb, joining only this driver's own transaction (what ``job_transaction`` yields)."""

from __future__ import annotations

from typing import Sequence

from ..errors import InvalidOption
from .base_async import AsyncCallerConnection, AsyncWrites
from .memory_coordination import MemoryOutbox
from .memory_jobs import MemoryJobs, MemoryTransaction
from .memory_steps import MemorySteps
from .memory_table import MemoryTable
from .records import Enqueued, NewJob
from .records_steps import NewEvent, SentEvent


class MemoryAsyncWrites(AsyncWrites):
    def __init__(self, table: MemoryTable, jobs: MemoryJobs, outbox: MemoryOutbox, steps: MemorySteps) -> None:
        self._table = table
        self._jobs = jobs
        self._outbox = outbox
        self._steps = steps

    def _own(self, conn: AsyncCallerConnection) -> MemoryTransaction:
        if not (isinstance(conn, MemoryTransaction) and conn.table is self._table):
            raise InvalidOption("conn", "the memory driver joins only a transaction from its own job_transaction()")
        return conn

    async def job_enqueue_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[Enqueued]:
        return self._jobs.job_enqueue(jobs, self._own(conn))

    async def outbox_stage_async(self, jobs: Sequence[NewJob], conn: AsyncCallerConnection) -> list[int]:
        return self._outbox.outbox_stage(jobs, self._own(conn))

    async def event_send_async(self, event: NewEvent, conn: AsyncCallerConnection) -> SentEvent:
        return self._steps.event_send(event, self._own(conn))
