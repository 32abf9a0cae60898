"""Cron tasks: ``task(name, cron, tz, job, input)`` enqueues ``job`` at every occurrence.

A task never holds a body: at each occurrence the scheduler's leader enqueues the task's job
with the task's input, through the one enqueue path, under a key scoped to the occurrence
(``task:NAME:OCCURRENCE_MS:JOBKEY``): two dispatches of one occurrence are one job, while the
job's own key still says which job it is. ``handle.enqueue()`` runs the job now, outside the
schedule, with the job's own plain key.

``tz`` is required and is a real IANA zone (``Europe/Berlin``, ``UTC``): occurrences are
wall-clock times of that zone across daylight-saving changes (``cron.py``). When the
scheduler was away across occurrences, ``catch_up`` says what happens:

* ``run-once`` (default): ONE run for all of them (keyed by the earliest missed);
* ``skip``: only the latest missed occurrence runs;
* ``run-all``: each missed occurrence runs, oldest first, at most ``max_catch_up`` (the rest
  are dropped, and said so in the log).

In every case the task's watermark moves past all of them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from .cron import CronResolver, check_expression, check_zone
from .errors import InvalidOption
from .options import finite_count, plain_name
from .payload import encode_payload

if TYPE_CHECKING:
    from .drivers.base import NewJob
    from .reads import Enqueued
    from .registry import JobHandle, Registry

CATCH_UP = ("run-once", "skip", "run-all")
_MAX_KEY = 1024
_COUNT_AT_MOST = 10_000   # missed occurrences counted for the log (the dropped ones are not walked further)


@dataclass(frozen=True)
class TaskSpec:
    """What makes two declarations the same task."""

    name: str
    cron: str
    tz: str
    job: str
    input: bytes
    catch_up: str
    max_catch_up: int


class TaskHandle:
    """What ``task()`` returns; the scheduler reads it, ``enqueue()`` runs the job now."""

    def __init__(self, spec: TaskSpec, job: "JobHandle", input: Any) -> None:
        self.spec = spec
        self._built: object = None    # task()'s proof, for the registry
        self.name = spec.name
        self.cron = spec.cron
        self.tz = spec.tz
        self.job = job
        self.input = input
        self.catch_up = spec.catch_up
        self.max_catch_up = spec.max_catch_up

    def __repr__(self) -> str:
        return f"<task {self.name!r} {self.cron!r} {self.tz} -> {self.job.name}>"

    def occurrence_key(self, occurrence_ms: float) -> str:
        """The idempotency key of one occurrence's job (within the job's namespace)."""
        job_key = self.job.key_for(self.input)
        key = f"task:{self.name}:{int(occurrence_ms)}:{job_key}"
        if len(key) > _MAX_KEY:   # a long job key is digested, never truncated into a collision
            key = f"task:{self.name}:{int(occurrence_ms)}:sha256:{hashlib.sha256(job_key.encode()).hexdigest()}"
        return key

    def jobs_for(self, occurrences: Sequence[float], *, max_payload_bytes: int,
                 by: str | None = None) -> list["NewJob"]:
        """The jobs of these occurrences, built by the one enqueue path's rules; ``by`` names
        the scheduler that dispatched them (``enqueued_by`` is ``task:NAME@SCHEDULER``)."""
        from .enqueue import build_jobs
        return build_jobs(self.job, [self.input] * len(occurrences), max_payload_bytes=max_payload_bytes,
                          keys=[self.occurrence_key(o) for o in occurrences],
                          enqueued_by=f"task:{self.name}@{by}" if by else f"task:{self.name}")

    def plan(self, watermark_ms: float, now_ms: float, resolver: CronResolver) -> tuple[list[float], int]:
        """Which occurrences in ``(watermark_ms, now_ms]`` to dispatch, and how many missed
        ones the catch-up rule drops."""
        if self.catch_up == "skip":
            latest = resolver.latest(self.cron, self.tz, now_ms)
            if latest is None or latest <= watermark_ms:
                return [], 0
            missed = len(resolver.between(self.cron, self.tz, watermark_ms, now_ms, _COUNT_AT_MOST))
            return [latest], max(0, missed - 1)
        if self.catch_up == "run-once":
            return resolver.between(self.cron, self.tz, watermark_ms, now_ms, 1), 0
        due = resolver.between(self.cron, self.tz, watermark_ms, now_ms, _COUNT_AT_MOST)
        return due[:self.max_catch_up], max(0, len(due) - self.max_catch_up)

    def enqueue(self, **options: Any) -> "Enqueued":
        """Run the task's job now, outside the schedule, with the job's own key."""
        return self.job.enqueue(self.input, enqueued_by=f"task:{self.name}:manual", **options)


def task(*, name: str, cron: str, tz: str, job: "JobHandle", input: Any = None,
         catch_up: str = "run-once", max_catch_up: int = 100,
         registry: "Registry | None" = None) -> TaskHandle:
    """Declare a cron task (see the module doc); refused at declaration when anything in it
    could never run: the expression, the zone, an input the job would refuse."""
    from .registry import REGISTRY, JobHandle
    name = plain_name(name, "task.name")
    cron = check_expression(cron)
    check_zone(tz)
    if not isinstance(job, JobHandle):
        raise InvalidOption("task.job", "must be a job declared with @job")
    if catch_up not in CATCH_UP:
        raise InvalidOption("task.catch_up", f"must be one of {', '.join(CATCH_UP)}, got {catch_up!r}")
    max_catch_up = finite_count(max_catch_up, "task.max_catch_up", minimum=1, maximum=10_000)
    input = job.validate({} if input is None else input)   # checked now, not at 3 a.m.
    encoded = encode_payload(input)
    job.key_for(input)
    job.tenant_for(input)
    spec = TaskSpec(name, cron, tz, job.name, encoded, catch_up, max_catch_up)
    handle = TaskHandle(spec, job, input)
    from .registry import BUILT
    handle._built = BUILT
    return (registry if registry is not None else REGISTRY)._add_task(handle)
