"""``job(aging="1m")``: priorities that cannot starve.

Lower priority numbers run first. A job of a queue that declares ``aging`` gains one level of
priority (its number drops by one) every ``aging`` it waits ready, down to the queue's floor,
so a steady stream of urgent work cannot keep less urgent work waiting forever: a job enqueued
at 9 beside a stream of 0s runs after at most about 9 steps of waiting.

Aging is a property of the QUEUE, declared on its jobs: every job of an aging queue declares
it, with one step. A queue whose jobs disagree (one ages, one does not; or two steps) is
refused at the second declaration (``X_JOB_AGING_MIXED``): a row of the queue ages whichever
job it belongs to, so a job that does not say so must not find its rows moved. The floor is
the queue's best declared priority, ``min(0, priority=)`` over its jobs: aged work comes level
with the queue's own most urgent jobs, never past them, and a row enqueued with a priority
below the floor (``enqueue(priority=-5)``, an urgent lane) is never touched.

Rows are aged where they are stored (``driver.job_age``): the upkeep rewrites the priority of
a waiting row and keeps what it was enqueued with in ``base_priority``, so every claim, fair
or keyed or rate-limited, sees the new order without an order of its own. A priority only
ever improves: a retried job keeps what it gained, and its age counts from its new run_at.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from .drivers.records import Aging
from .errors import XJobsError
from .options import duration_ms, duration_text

MIN_STEP_MS = 1.0   # ages are counted in whole microseconds; a step under 1 ms means no order at all


class AgingMixed(XJobsError, ValueError):
    """Two jobs of one queue that do not age alike: one declares ``aging`` and one does not,
    or they declare different steps. Refused at the second declaration."""

    code = "X_JOB_AGING_MIXED"


class Ages(Protocol):
    """What a declared job says of aging (a ``JobHandle``)."""

    @property
    def name(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def aging_ms(self) -> float | None: ...


def declared_aging(aging: object) -> float | None:
    """``job(aging=)`` as a step in milliseconds: a duration of at least 1 ms, finite; None: no aging."""
    if aging is None:
        return None
    return duration_ms(aging, "aging", minimum_ms=MIN_STEP_MS)


def check_queue(new: Ages, others: Iterable[Ages]) -> None:
    """Refuse ``new`` when another job of its queue ages otherwise (module doc)."""
    for other in others:
        if other.queue != new.queue or other.name == new.name or other.aging_ms == new.aging_ms:
            continue
        if other.aging_ms is None or new.aging_ms is None:
            aged, plain = (new, other) if new.aging_ms is not None else (other, new)
            raise AgingMixed(f"queue {new.queue!r}: job {aged.name!r} declares aging and job {plain.name!r} does "
                             "not; aging is the queue's: declare it on both, or put one in another queue")
        raise AgingMixed(f"queue {new.queue!r}: jobs {other.name!r} and {new.name!r} age every "
                         f"{_shown(other.aging_ms)} and every {_shown(new.aging_ms)}; a queue ages by one step")


def queue_agings(jobs: Iterable[Ages]) -> dict[str, Aging]:
    """Queue -> its aging (step, floor), for the aging queues among ``jobs``."""
    steps: dict[str, float] = {}
    floors: dict[str, int] = {}
    for job in jobs:
        floors[job.queue] = min(floors.get(job.queue, 0), job.priority)
        if job.aging_ms is not None:
            steps[job.queue] = job.aging_ms
    return {queue: Aging(queue, step, floors[queue]) for queue, step in sorted(steps.items())}


def _shown(ms: float | None) -> str:
    return "never" if ms is None else duration_text(ms)


__all__ = ["MIN_STEP_MS", "AgingMixed", "Ages", "declared_aging", "check_queue", "queue_agings"]
