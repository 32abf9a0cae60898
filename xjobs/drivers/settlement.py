"""Waiting for a job to settle: the driver capability behind ``xjobs.result()``.

``job_await(job_id, timeout_s)`` answers the job's ``Settlement`` once it is completed, dead or
cancelled, or as it stands when ``timeout_s`` ran out (``None``: no limit); ``JobNotFound`` for
an id no row has. Postgres waits on LISTEN (``pg_settlement.py``): every path that settles a
job notifies ``<channel>_settled`` with its id at commit, and the waiter reads the row after its
LISTEN took effect, so a settlement just before the wait is not missed. The memory driver
waits on a condition its table signals on every move to a finished state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .records import FINISHED_STATES

# Every settling path notifies; a note lost anyway (a server restart between commit and
# delivery) costs a waiter at most this long: it reads the row again this often
RECHECK_S = 5.0


@dataclass(frozen=True, slots=True)
class Settlement:
    """What a waiter reads of a job: its state, its error, and its result (JSON) if completed."""

    job_id: int
    state: str
    last_error: str | None = None
    result: Any = None

    @property
    def settled(self) -> bool:
        return self.state in FINISHED_STATES


@runtime_checkable
class SettlementWaits(Protocol):
    def job_await(self, job_id: int, timeout_s: float | None) -> Settlement: ...
    async def job_await_async(self, job_id: int, timeout_s: float | None) -> Settlement: ...


def notified(payload: str, job_id: int) -> bool:
    """Whether a ``<channel>_settled`` note (comma-separated ids) names ``job_id``."""
    wanted = str(job_id)
    return any(part == wanted for part in payload.split(","))
