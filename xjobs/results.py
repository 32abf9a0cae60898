"""What a job returned: ``xjobs.result``, ``xjobs.aresult``, and ``Enqueued.result()`` /
``Enqueued.aresult()`` on what enqueue answers.

    job = resize.enqueue({"image": 7})
    job.result(timeout=30)          # {"width": 640, ...}, once the body returned it
    await xjobs.aresult(job.id)     # the same, awaited

A completed job answers what its body returned (None when it returned None). A dead job raises
``JobFailed`` (``X_JOB_FAILED``, with the job's last error), a cancelled one ``JobCancelled``
(``X_JOB_CANCELLED``); a job still unsettled when ``timeout`` (seconds) runs out raises
``ResultTimeout`` (``X_TIMEOUT``) and is left as it is. The wait is the driver's
``job_await``: on PostgreSQL a LISTEN on the job's settlement, not a poll of its row.
"""

from __future__ import annotations

from typing import Any

from .config import current_driver
from .drivers.settlement import Settlement, SettlementWaits
from .errors import InvalidOption, JobCancelled, JobFailed, ResultTimeout


def result(job_id: int, timeout: float | None = None, *, driver: SettlementWaits | None = None) -> Any:
    """Wait until job ``job_id`` settles and answer its result (see the module's text);
    ``timeout=None`` waits as long as it takes. ``JobNotFound`` for an unknown id."""
    return answer(_waits(driver).job_await(job_id, timeout), timeout)


async def aresult(job_id: int, timeout: float | None = None, *, driver: SettlementWaits | None = None) -> Any:
    """``result``, awaited: on PostgreSQL an ``AsyncConnection`` of its own LISTENs."""
    return answer(await _waits(driver).job_await_async(job_id, timeout), timeout)


def _waits(driver: SettlementWaits | None) -> SettlementWaits:
    found = driver if driver is not None else current_driver()
    if not isinstance(found, SettlementWaits):
        raise InvalidOption("driver", f"{type(found).__name__} cannot wait for a job's result")
    return found


def answer(settlement: Settlement, timeout: float | None) -> Any:
    """A settlement as ``result`` answers it: the value, or the job's failure as an error."""
    if settlement.state == "completed":
        return settlement.result
    if settlement.state == "dead":
        raise JobFailed(settlement.job_id, settlement.last_error)
    if settlement.state == "cancelled":
        raise JobCancelled(settlement.job_id, settlement.last_error)
    raise ResultTimeout(f"job {settlement.job_id} is still {settlement.state} after {timeout}s",
                        job_id=settlement.job_id, state=settlement.state)
