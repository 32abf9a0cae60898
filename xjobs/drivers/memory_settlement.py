"""``job_await`` on the memory driver: a condition the table signals whenever a job moves to a
finished state (``MemoryTable.move``), in place of Postgres's LISTEN."""

from __future__ import annotations

import asyncio
import time

import orjson

from .memory_table import MemoryTable
from .records import FINISHED_STATES
from .refusals import job_not_found
from .settlement import Settlement


class MemorySettlement:
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def _read(self, job_id: int) -> Settlement:
        row = self._table.rows.get(job_id)
        if row is None:
            raise job_not_found(job_id)
        result = orjson.loads(row.result) if row.result is not None and row.state == "completed" else None
        return Settlement(job_id, row.state, row.last_error, result)

    def job_await(self, job_id: int, timeout_s: float | None) -> Settlement:
        table = self._table
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with table.settled:
            while True:
                now = self._read(job_id)
                left = None if deadline is None else deadline - time.monotonic()
                if now.state in FINISHED_STATES or (left is not None and left <= 0):
                    return now
                table.settled.wait(left)

    async def job_await_async(self, job_id: int, timeout_s: float | None) -> Settlement:
        # the condition is a thread's: the wait runs on one, off the event loop
        return await asyncio.to_thread(self.job_await, job_id, timeout_s)
