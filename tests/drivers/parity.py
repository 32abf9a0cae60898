"""Shorthands the conformance suite calls the driver verbs with: one job enqueued or claimed,
a step written, an event sent. Each takes the driver first, so one test body serves both drivers."""

from __future__ import annotations

import orjson

from xjobs.drivers.base import Lease, NewEvent, NewJob, StepOutcome, StepResult, StepSleep, StepWait
from xjobs.payload import encode_payload
from xjobs.drivers.base import Claim

LEASE = 30_000.0


def new_job(key: str = "k1", *, name: str = "send", queue: str = "default",
            tenant: str | None = "acme", payload: object = None, priority: int = 0,
            max_attempts: int = 5, run_at_ms: float | None = None,
            enqueued_by: str | None = None) -> NewJob:
    return NewJob(name=name, queue=queue, payload=encode_payload(payload if payload is not None else {"key": key}),
                  idempotency_key=key, tenant=tenant, enqueued_by=enqueued_by, priority=priority,
                  max_attempts=max_attempts, run_at_ms=run_at_ms)


def enqueue(driver, key: str = "k1", **kw) -> int:
    [result] = driver.job_enqueue([new_job(key, **kw)])
    assert not result.deduped
    return result.id


def claim(driver, queue: str = "default", limit: int = 10, worker: str = "w1", lease: float = LEASE):
    return driver.job_claim(Claim([queue], limit, lease, worker))


def claim_one(driver, queue: str = "default", **kw):
    [job] = claim(driver, queue, limit=1, **kw)
    return job


def at(value: float | None) -> float | None:
    """Postgres hands times back through float8 seconds; compare them to the microsecond."""
    return None if value is None else round(value, 3)


def state(driver, job_id: int) -> str:
    return driver.job_get(job_id).state


# -- steps and events ----------------------------------------------------------------------------


def run(driver, key: str = "k", queue: str = "default", **kw) -> tuple[int, Lease]:
    """Enqueue one job and claim it: its id and the claim's lease."""
    job_id = enqueue(driver, key, queue=queue, **kw)
    [job] = [j for j in claim(driver, queue) if j.id == job_id]
    return job_id, Lease(job.id, job.token)


def reclaim(driver, job_id: int, **kw) -> Lease:
    [job] = [j for j in claim(driver, **kw) if j.id == job_id]
    return Lease(job.id, job.token)


def put(driver, lease: Lease, name: str, value: object = None, attempt: int = 1,
        duration_ms: float = 0.0) -> bool:
    return driver.step_put(lease, StepResult(name, orjson.dumps(value), attempt, duration_ms))


def sleep(driver, lease: Lease, name: str, duration_ms: float, attempt: int = 1) -> StepOutcome:
    return driver.step_sleep(lease, StepSleep(name, duration_ms, attempt))


def wait(driver, lease: Lease, name: str, event: str = "paid", key: str = "o1", *,
         timeout_ms: float | None = None, poll_ms: float | None = None, attempt: int = 1) -> StepOutcome:
    return driver.step_wait(lease, StepWait(name, event, key, timeout_ms, poll_ms, attempt))


def send(driver, name: str = "paid", key: str = "o1", payload: object = None, conn=None):
    return driver.event_send(NewEvent(name, key, orjson.dumps(payload)), conn=conn)


def names(driver, job_id: int) -> list[tuple[str, str, str]]:
    return [(s.name, s.kind, s.state) for s in driver.step_list(job_id).steps]


def step(driver, job_id: int, name: str):
    [found] = [s for s in driver.step_list(job_id).steps if s.name == name]
    return found


def outcome(result: StepOutcome) -> tuple:
    """A StepOutcome with its time compared to the microsecond."""
    return (result.done, result.value, at(result.wake_at), result.timed_out, result.fenced)


def parked(view) -> tuple:
    return (view.state, view.attempt, at(view.run_at), view.last_error, view.lease_expires_at)
