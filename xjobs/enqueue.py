"""The one enqueue implementation. ``handle.enqueue``/``enqueue_many``, the CLI's
``xjobsd enqueue``, the scheduler's dispatches and the outbox relay all come through here, so the
key, tenant, payload and timing rules cannot drift between entry points.

Everything that can be refused is refused before anything is written: one bad input in a
batch of ten thousand writes nothing. A call of more than ``ENQUEUE_CHUNK`` inputs is checked
as a whole first (count, timing, every input's validation), then built chunk by chunk while
the driver inserts the chunks before it, in one transaction: what only building finds (a
payload over the limit, a key function that raises) rolls the whole call back.

``aenqueue_many`` is the same call, awaited: the same ``build_jobs``, then the driver's
``job_enqueue_async`` on the caller's ``AsyncConnection`` (or SQLAlchemy ``AsyncSession``);
without one, ``enqueue_many`` itself on a worker thread (see ``aenqueue_many``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from .config import current_driver, current_settings
from .connections import AsyncJoinable, Joinable, ajoined, async_writes, joined
from .drivers.base import LATEST_MS, JobDriver, NewJob
from .drivers.records import ENQUEUE_CHUNK
from .errors import InvalidOption
from .options import duration_ms, finite_count, finite_option
from .errors import PayloadTooLarge
from .payload import encode_payload
from .reads import Enqueued
from .tracing import current_traceparent

if TYPE_CHECKING:
    from .registry import JobHandle

MAX_BATCH = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024     # one statement must stay well inside PostgreSQL's 1 GB
# an awaited call builds its jobs on the loop this many at a time, giving the loop's other tasks
# a turn between two slices: a hundred take about a millisecond (bench/async_lag.py)
BUILD_ON_LOOP = 100


def _timing(delay: object, run_at: object) -> tuple[float | None, float]:
    """(absolute run_at in epoch ms or None, delay in ms). A delay is added to "now" by the
    driver, on the database's clock, so a client whose clock drifts does not skew it."""
    if delay is not None and run_at is not None:
        raise InvalidOption("delay", "give delay or run_at, not both")
    if delay is not None:
        return None, duration_ms(delay, "delay")
    return _run_at_ms(run_at), 0.0


def _run_at_ms(run_at: object) -> float | None:
    if run_at is None:
        return None
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise InvalidOption("run_at", "must be timezone-aware")
        run_at = run_at.timestamp() * 1000.0
    return finite_option(run_at, "run_at", minimum=0.0, maximum=LATEST_MS)


def build_jobs(handle: "JobHandle", inputs: Sequence[Any], *, delay: object = None,
               run_at: object = None, priority: int | None = None,
               enqueued_by: str | None = None, max_payload_bytes: int,
               keys: Sequence[str] | None = None) -> list[NewJob]:
    """The jobs ``inputs`` make, every rule checked. ``keys`` replaces the idempotency key of
    each input (the scheduler's occurrence-scoped keys); everything else is the job's own."""
    make, count = _planned(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                           enqueued_by=enqueued_by, max_payload_bytes=max_payload_bytes, keys=keys)
    jobs = make(0, count)
    _check_bytes(sum(len(job.payload) for job in jobs))
    return jobs


def build_chunks(handle: "JobHandle", inputs: Sequence[Any], *, size: int = ENQUEUE_CHUNK,
                 delay: object = None, run_at: object = None, priority: int | None = None,
                 enqueued_by: str | None = None, max_payload_bytes: int) -> Iterator[list[NewJob]]:
    """``build_jobs`` in chunks of ``size``, made as they are asked for: what can be refused
    of the call as a whole is refused here, at once; a payload or key is refused when its
    chunk is built."""
    make, count = _planned(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                           enqueued_by=enqueued_by, max_payload_bytes=max_payload_bytes, keys=None)

    def chunks() -> Iterator[list[NewJob]]:
        total = 0
        for start in range(0, count, size):
            jobs = make(start, min(count, start + size))
            total += sum(len(job.payload) for job in jobs)
            _check_bytes(total)
            yield jobs
    return chunks()


def _planned(handle: "JobHandle", inputs: Sequence[Any], *, delay: object, run_at: object,
             priority: int | None, enqueued_by: str | None, max_payload_bytes: int,
             keys: Sequence[str] | None) -> tuple[Callable[[int, int], list[NewJob]], int]:
    """The checks of a call as a whole, and ``make(start, stop)``: the jobs of that slice."""
    if len(inputs) > MAX_BATCH:
        raise InvalidOption("inputs", f"at most {MAX_BATCH} jobs per call, got {len(inputs)}")
    at, delay_ms = _timing(delay, run_at)
    prio = handle.priority if priority is None else finite_count(priority, "priority", minimum=-32768, maximum=32767)
    if enqueued_by is not None and (not isinstance(enqueued_by, str) or "\x00" in enqueued_by):
        raise InvalidOption("enqueued_by", "must be a string without NUL characters")
    max_attempts = handle.retry.attempts
    if keys is not None and len(keys) != len(inputs):
        raise InvalidOption("keys", "one key per input")
    checked = [handle.validate(item) for item in inputs]   # every one, before anything is written
    traceparent = current_traceparent()   # stamped here, where the enqueuing code's span is
    keyed = handle.keyed
    places = None if keyed is None else [keyed.key_for(handle.name, item) for item in checked]
    debounce_ms, debounce_max_ms = handle.snoozing.debounce_ms, handle.snoozing.debounce_max_ms
    if debounce_ms is not None and at is None and delay_ms == 0.0:
        delay_ms = debounce_ms     # trailing: a debounced job waits its debounce from the start

    def make(start: int, stop: int) -> list[NewJob]:
        return [NewJob(name=handle.name, queue=handle.queue,
                       payload=encode_payload(checked[i], max_payload_bytes),
                       idempotency_key=handle.key_for(checked[i]) if keys is None else keys[i],
                       tenant=(tenant := handle.tenant_for(checked[i])),
                       enqueued_by=enqueued_by, priority=prio, max_attempts=max_attempts, run_at_ms=at,
                       delay_ms=delay_ms, dedupe_window_ms=handle.dedupe_window_ms, traceparent=traceparent,
                       concurrency_key=None if places is None else places[i],
                       key_cap=None if keyed is None else keyed.cap, key_hold=keyed is not None and keyed.hold,
                       fair_key=handle.fair_key_for(checked[i], tenant),
                       debounce_ms=debounce_ms, debounce_max_ms=debounce_max_ms,
                       rate_key=handle.rate_key_for(checked[i]))
                for i in range(start, stop)]
    return make, len(checked)


def build_callback(handle: "JobHandle", given: Any, *, key: str, max_payload_bytes: int) -> NewJob:
    """A batch's callback (``children.py``): its input is the envelope ``{"input": given}`` the
    members' counts are merged into when it wakes, so it is not validated as an input of the
    job; its tenant is the job's ``tenant()`` of what the caller gave, not of the envelope."""
    tenant = handle.tenant_for(given)
    return NewJob(name=handle.name, queue=handle.queue,
                  payload=encode_payload({"input": given}, max_payload_bytes), idempotency_key=key,
                  tenant=tenant, priority=handle.priority, max_attempts=handle.retry.attempts,
                  traceparent=current_traceparent(), fair_key=handle.fair_key_for(given, tenant),
                  rate_key=handle.rate_key_for(given))


def _check_bytes(total: int) -> None:
    if total > MAX_BATCH_BYTES:
        raise PayloadTooLarge(f"one call carries {total} payload bytes, over {MAX_BATCH_BYTES}; "
                              "enqueue in smaller batches")


def enqueue_many(handle: "JobHandle", inputs: Sequence[Any], *, delay: object = None,
                 run_at: object = None, priority: int | None = None,
                 conn: Joinable | None = None,
                 enqueued_by: str | None = None, driver: JobDriver | None = None) -> list[Enqueued]:
    callers = joined(conn, "enqueue")
    driver = driver if driver is not None else current_driver()
    settings = current_settings()
    if len(inputs) > ENQUEUE_CHUNK:   # built while the chunks before it are inserted
        done = driver.job_enqueue_chunks(
            build_chunks(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                         enqueued_by=enqueued_by, max_payload_bytes=settings.max_payload_bytes), conn=callers)
    else:
        jobs = build_jobs(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                          enqueued_by=enqueued_by, max_payload_bytes=settings.max_payload_bytes)
        done = driver.job_enqueue(jobs, conn=callers) if jobs else []
    # the driver's records, as handles that can read their job back (``Enqueued.get``)
    return [Enqueued(e.id, e.deduped, e.debounced) for e in done]


async def aenqueue_many(handle: "JobHandle", inputs: Sequence[Any], *, delay: object = None,
                        run_at: object = None, priority: int | None = None,
                        conn: AsyncJoinable | None = None, enqueued_by: str | None = None,
                        driver: JobDriver | None = None) -> list[Enqueued]:
    """``enqueue_many``, awaited. With ``conn=`` (a psycopg ``AsyncConnection``, or a SQLAlchemy
    ``AsyncSession``/``AsyncConnection``) the jobs are checked and built as ``enqueue_many``
    builds them, then awaited on it, in its transaction. Without one, ``enqueue_many`` runs on
    a worker thread through the driver's pool: that pool is the process's, opened once and
    shared by every thread and event loop, where a pool of async connections would belong to
    the one loop that opened it, and need closing on it."""
    driver = driver if driver is not None else current_driver()
    if conn is None:
        return await asyncio.to_thread(enqueue_many, handle, inputs, delay=delay, run_at=run_at,
                                       priority=priority, enqueued_by=enqueued_by, driver=driver)
    callers = await ajoined(conn, "aenqueue")
    writes = async_writes(driver)
    jobs = await abuild_jobs(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                             enqueued_by=enqueued_by)
    done = await writes.job_enqueue_async(jobs, callers) if jobs else []
    return [Enqueued(e.id, e.deduped, e.debounced) for e in done]


async def abuild_jobs(handle: "JobHandle", inputs: Sequence[Any], *, delay: object, run_at: object,
                      priority: int | None, enqueued_by: str | None) -> list[NewJob]:
    """``build_jobs`` for an awaited call, on the loop, ``BUILD_ON_LOOP`` jobs at a time with
    a turn for the loop's other tasks between two slices. Not on a worker thread: building is
    pure Python, so the thread would hold the GIL throughout, and the loop, woken by its own
    I/O, waits up to the interpreter's switch interval (5 ms) each time to take it back: with
    a thousand jobs built on a thread, a heartbeat's p99 lag was 5 ms; sliced, 1 to 2 ms."""
    make, count = _planned(handle, inputs, delay=delay, run_at=run_at, priority=priority,
                           enqueued_by=enqueued_by, keys=None,
                           max_payload_bytes=current_settings().max_payload_bytes)
    jobs: list[NewJob] = []
    for start in range(0, count, BUILD_ON_LOOP):
        if start:
            await asyncio.sleep(0)      # the loop's other tasks run here
        jobs += make(start, min(count, start + BUILD_ON_LOOP))
    _check_bytes(sum(len(job.payload) for job in jobs))
    return jobs
