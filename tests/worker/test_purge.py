"""``purge()`` on both drivers: a step per target, one clock reading for the pass, targets read
once per attempt, doubled names refused before any delete, and a replay that deletes nothing
new."""

from __future__ import annotations

import contextlib
import math

import pytest

import xjobs
from xjobs.clock import ManualClock
from xjobs.enqueue import enqueue_many
from xjobs.errors import InvalidOption
from xjobs.testing import run_until_idle


class Store:
    """An app's store: deletes what expired by ``now_ms``, and remembers every call."""

    def __init__(self, name: str, expired: int = 3, fails: int = 0, answer: object = None) -> None:
        self.name = name
        self.expired = expired
        self.fails = fails          # calls that raise, first
        self.answer = answer        # answered instead of the count, when given
        self.calls: list[int] = []

    def purge_expired(self, now_ms: int) -> int:
        self.calls.append(now_ms)
        if self.fails:
            self.fails -= 1
            raise ConnectionError(f"{self.name}: the database went away")
        if self.answer is not None:
            return self.answer      # type: ignore[return-value]
        deleted, self.expired = self.expired, 0
        return deleted


def declare(stores: list[Store], clock: ManualClock, attempts: int = 3):
    registry = xjobs.Registry()
    reads: list[int] = []

    def targets() -> list[Store]:
        reads.append(1)
        return stores
    handle = xjobs.purge(name="app-purge", targets=targets, clock=clock,
                         retry=xjobs.Retry(attempts=attempts, delay=0), registry=registry)
    return registry, handle, reads


def run(driver, registry, handle) -> int:
    [job] = enqueue_many(handle, [{}], driver=driver)
    run_until_idle(driver=driver, registry=registry)
    return job.id


def steps(driver, job_id: int) -> dict[str, object]:
    return {step.name: step.result for step in driver.job_get(job_id).steps}


def test_every_target_is_swept_once_in_its_own_step_with_one_clock_reading(driver, clock):
    stores = [Store("rate_limits", 5), Store("idempotency", 0), Store("lockouts", 2)]
    registry, handle, reads = declare(stores, clock)
    job_id = run(driver, registry, handle)
    now = int(clock.now_ms())
    assert driver.job_get(job_id).state == "completed"
    assert [s.calls for s in stores] == [[now], [now], [now]]
    assert steps(driver, job_id) == {"now": now, "purge:rate_limits": 5, "purge:idempotency": 0,
                                     "purge:lockouts": 2}
    assert reads == [1]
    assert registry.tasks() == []                  # it declares no schedule of its own


def test_a_failed_attempt_resumes_at_the_target_it_stopped_on_with_the_first_attempts_now(driver, clock):
    stores = [Store("a", 4), Store("b", 6, fails=1), Store("c", 1)]
    registry, handle, reads = declare(stores, clock)
    first = int(clock.now_ms())
    [job] = enqueue_many(handle, [{}], driver=driver)
    run_until_idle(driver=driver, registry=registry)      # attempt 1 fails on b; 2 is due at once
    view = driver.job_get(job.id)
    assert view.state == "completed" and view.attempt == 2
    # a ran once; b was called twice (its first call failed); c once: every one at the same now
    assert [s.calls for s in stores] == [[first], [first, first], [first]]
    assert steps(driver, job.id) == {"now": first, "purge:a": 4, "purge:b": 6, "purge:c": 1}
    assert reads == [1, 1]                          # targets() read once per attempt


def test_a_replay_answers_the_recorded_counts_and_deletes_nothing_new(driver, clock):
    stores = [Store("a", 4), Store("b", 6)]
    registry, handle, reads = declare(stores, clock)

    @contextlib.contextmanager
    def lost_after_the_pass(ctx):
        """The first attempt fails once its pass is over: every step recorded, the job not
        completed, as when a worker dies between the last step and the completion."""
        yield
        if ctx.attempt == 1:
            raise ConnectionError("the completion never reached the database")
    registry.run_context = lost_after_the_pass
    [job] = enqueue_many(handle, [{}], driver=driver)
    now = int(clock.now_ms())
    run_until_idle(driver=driver, registry=registry)
    view = driver.job_get(job.id)
    assert view.state == "completed" and view.attempt == 2 and reads == [1, 1]
    assert [s.calls for s in stores] == [[now], [now]]       # the replay called neither again
    assert steps(driver, job.id) == {"now": now, "purge:a": 4, "purge:b": 6}


@pytest.mark.parametrize("stores", [[Store("a"), Store("b"), Store("a")], [Store("x"), Store("x")]])
def test_two_targets_under_one_name_are_refused_before_the_first_delete(driver, clock, stores):
    registry, handle, _ = declare(stores, clock)
    job_id = run(driver, registry, handle)
    view = driver.job_get(job_id)
    assert view.state == "dead" and view.attempt == 1          # the app's code: not retried
    assert "X_PURGE_TARGET_DUPLICATE" in (view.last_error or "")
    assert all(s.calls == [] for s in stores) and steps(driver, job_id) == {}


@pytest.mark.parametrize("answer", [True, -1, 2.5, math.nan, "3", [3]])
def test_a_target_answering_no_count_fails_its_step_and_is_not_retried(driver, clock, answer):
    stores = [Store("a", 2), Store("b", answer=answer)]
    registry, handle, _ = declare(stores, clock)
    job_id = run(driver, registry, handle)
    view = driver.job_get(job_id)
    assert view.state == "dead" and "X_PURGE_TARGET_INVALID" in (view.last_error or "")
    assert steps(driver, job_id) == {"now": int(clock.now_ms()), "purge:a": 2}


@pytest.mark.parametrize("answered", [[object()], "ab", None, [Store(" padded ")]])
def test_what_is_no_target_is_refused_before_any_is_called(driver, clock, answered):
    registry = xjobs.Registry()
    fine = Store("fine")
    handle = xjobs.purge(name="p", targets=lambda: [fine, *answered] if isinstance(answered, list) else answered,
                         clock=clock, registry=registry)
    job_id = run(driver, registry, handle)
    view = driver.job_get(job_id)
    assert view.state == "dead" and fine.calls == []
    assert "X_PURGE_TARGET_INVALID" in (view.last_error or "")


def test_the_declaration_refuses_what_can_never_run_and_pairs_with_the_hourly_task():
    registry = xjobs.Registry()
    with pytest.raises(InvalidOption) as refused:
        xjobs.purge(name="p", targets=[Store("a")], registry=registry)     # type: ignore[arg-type]
    assert refused.value.code == "X_INVALID_OPTION" and refused.value.option == "purge.targets"
    with pytest.raises(InvalidOption):
        xjobs.purge(name=" p", targets=lambda: [], registry=registry)
    with pytest.raises(InvalidOption):
        xjobs.purge(name="p", targets=lambda: [], clock=object(), registry=registry)   # type: ignore[arg-type]
    handle = xjobs.purge(name="p", targets=lambda: [], registry=registry)
    assert isinstance(Store("a"), xjobs.PurgeTarget) and not isinstance(object(), xjobs.PurgeTarget)
    assert xjobs.DEFAULT_PURGE_CRON == "0 * * * *" and registry.tasks() == []
    task = xjobs.task(name="p-hourly", cron=xjobs.DEFAULT_PURGE_CRON, tz="UTC", job=handle, registry=registry)
    assert [t.name for t in registry.tasks()] == ["p-hourly"] and task.job is handle


@pytest.mark.postgres
def test_the_example_app_declares_both_halves_and_sweeps_its_stores(pg_dsn, monkeypatch):
    import psycopg
    from examples import purge_app
    from xjobs import REGISTRY, testing
    monkeypatch.setenv("XJOBS_DATABASE_URL", pg_dsn)
    assert REGISTRY.get("app-purge") is purge_app.app_purge
    [hourly] = [t for t in REGISTRY.tasks() if t.name == "app-purge-hourly"]
    assert hourly.cron == xjobs.DEFAULT_PURGE_CRON and hourly.job is purge_app.app_purge
    purge_app.RateLimits().purge_expired(0)           # its table exists
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("insert into app_rate_limits values ('example:old', 3, now() - interval '1 hour'), "
                     "('example:live', 1, now() + interval '1 hour') on conflict (key) do nothing")
    purge_app.SESSIONS.open("gone", ttl_s=0)
    purge_app.SESSIONS.open("kept", ttl_s=3600)
    try:
        with testing.memory_queue() as driver:
            [job] = enqueue_many(purge_app.app_purge, [{}], driver=driver)
            testing.run_until_idle(purge_app.app_purge.queue, driver=driver)
            assert driver.job_get(job.id).state == "completed"
            swept = steps(driver, job.id)
            assert swept["purge:sessions"] == 1 and swept["purge:rate_limits"] == 1
        with psycopg.connect(pg_dsn) as conn:
            keys = {k for (k,) in conn.execute("select key from app_rate_limits where key like 'example:%'")}
        assert keys == {"example:live"}
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("drop table if exists app_rate_limits")


def test_one_name_is_one_purge_declared_again_only_over_the_same_targets():
    from xjobs.errors import DuplicateJob
    registry = xjobs.Registry()

    def targets() -> list[Store]:
        return []
    first = xjobs.purge(name="p", targets=targets, registry=registry)
    again = xjobs.purge(name="p", targets=targets, registry=registry)     # a module imported twice
    assert registry.get("p") in (first, again)
    with pytest.raises(DuplicateJob) as refused:
        xjobs.purge(name="p", targets=lambda: [], registry=registry)
    assert refused.value.code == "X_JOB_DUPLICATE"
    xjobs.job(queue="q", idempotency_key=lambda i: "k", tenant="none", name="mine", registry=registry)(
        lambda ctx, i: None)
    with pytest.raises(DuplicateJob):
        xjobs.purge(name="mine", targets=targets, registry=registry)
