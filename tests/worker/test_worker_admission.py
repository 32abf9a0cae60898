"""Admission, on both drivers: a job's fleet-wide slots cap how many of it run at once, and
the per-process limits shed what is over them, back to ready through the one shed path."""

from __future__ import annotations

import threading
import time

import pytest

import xjobs
from xjobs.context import SLOT_LOST
from xjobs.drivers.base import Claim, Slot, SlotRequest
from xjobs.errors import ConcurrencyUnenforceable
from xjobs.limits import Limits

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


class Overlap:
    """Counts how many bodies run at once, in all and per tenant."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.tenants: dict[str | None, int] = {}
        self.most_per_tenant: dict[str | None, int] = {}

    def body(self, ctx, i):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.tenants[ctx.tenant] = self.tenants.get(ctx.tenant, 0) + 1
            self.most_per_tenant[ctx.tenant] = max(self.most_per_tenant.get(ctx.tenant, 0),
                                                   self.tenants[ctx.tenant])
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
            self.tenants[ctx.tenant] -= 1


def test_a_capped_job_never_runs_beyond_its_slots_and_sheds_stay_ready(driver, registry):
    overlap = Overlap()
    capped = declare(registry, overlap.body, name="capped", concurrency=2)
    ids = enqueue(capped, driver, *({"n": n} for n in range(8)))
    pacer = Pacer(make_worker(driver, registry, concurrency=6, poll_ms=20))
    pacer.until(lambda: pacer.totals()["completed"] == 8, advance_ms=25)
    assert overlap.most <= 2
    for job_id in ids:
        view = driver.job_get(job_id)
        assert (view.state, view.attempt, view.last_error) == ("completed", 1, None)
    assert driver.slot_held() == {}                     # every slot was given back


def test_a_shed_job_goes_back_to_ready_without_an_attempt_or_an_error(driver, registry):
    capped = declare(registry, lambda ctx, i: None, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    before = driver.job_get(job_id)
    driver.slot_acquire(SlotRequest("capped", 1, "another-machine", 60_000))   # the fleet's only slot is held
    [claimed] = driver.job_claim(Claim(["q"], 1, 30_000, "w"))           # a claim without caps takes it
    worker = make_worker(driver, registry)
    worker.initialize()
    assert worker.take(claimed, 0.0) is None
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error, view.crashes) == ("ready", 0, None, 0)
    assert view.run_at == before.run_at                  # its place in line and its age are kept
    assert [h["outcome"] for h in view.history] == [h["outcome"] for h in before.history]   # no event
    assert worker.stats().shed == 1 and worker.stats().jobs == {"capped": {"shed": 1}}
    assert driver.job_claim(Claim(["q"], 1, 30_000, "w", caps={"capped": 1})) == []   # no spin
    worker.close()


def test_a_lost_slot_stops_the_run_and_gives_the_attempt_back(driver, registry):
    started, seen = threading.Event(), []

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
        seen.append(ctx.signal.code)
        ctx.signal.raise_if_set()          # a body that stops when told
    capped = declare(registry, body, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    assert driver.slot_release(Slot("capped", 0, worker.identity)) is True   # taken from under it
    pacer.until(lambda: seen == [SLOT_LOST], advance_ms=150)
    pacer.until(lambda: pacer.totals()["interrupted"] == 1, advance_ms=50)
    [entry] = driver.job_get(job_id).history
    assert (entry["outcome"], entry["attempt"]) == ("interrupted", 1)   # given back, not counted
    assert entry["error"].startswith("X_JOB_SLOT_LOST")
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_per_process_limits_run_one_job_of_a_tenant_at_a_time_without_spinning(driver, registry):
    overlap = Overlap()
    handle = declare(registry, overlap.body, name="tenanted", tenant=lambda i: i["t"])
    ids = enqueue(handle, driver, *({"n": n, "t": "acme"} for n in range(5)))
    enqueue(handle, driver, {"n": 9, "t": "globex"})
    pacer = Pacer(make_worker(driver, registry, concurrency=5, limits=Limits(tenant=1), poll_ms=20))
    pacer.until(lambda: pacer.totals()["completed"] == 6, advance_ms=25)
    # never two of acme's at once (whether globex's one ran beside one of them is the machine's timing)
    assert overlap.most_per_tenant == {"acme": 1, "globex": 1} and overlap.most <= 2
    # each claim took no more of acme's than its room: nothing was claimed only to be shed
    assert (pacer.totals()["shed"], pacer.totals()["claimed"]) == (0, 6), pacer.totals()
    for job_id in ids:
        view = driver.job_get(job_id)
        assert (view.state, view.attempt, view.last_error) == ("completed", 1, None)
    snapshot = pacer.worker.stats().limits
    assert snapshot["scope"] == "per worker process" and snapshot["config"]["tenant"] == 1  # type: ignore[index]
    assert snapshot["tracked"]["tenants_in_flight"] == 0  # type: ignore[index]


def test_a_zero_limit_is_a_hard_stop_that_claims_nothing(driver, registry, clock):
    handle = declare(registry, lambda ctx, i: None, name="stopped")
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry, limits=Limits(tenant=0), poll_ms=20))
    for _ in range(5):
        pacer.pass_(advance_ms=50)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("ready", 0)
    assert (pacer.totals()["claimed"], pacer.totals()["shed"], pacer.totals()["completed"]) == (0, 0, 0)


class WithoutSlots:
    """A driver of another make that has no fleet-wide slot store."""

    def __init__(self, driver) -> None:
        self._driver = driver

    def __getattr__(self, name: str):
        if name.startswith("slot_"):
            raise AttributeError(name)
        return getattr(self._driver, name)


def test_a_declared_cap_on_a_driver_without_slots_is_refused_at_start(memory_driver, registry):
    declare(registry, lambda ctx, i: None, name="capped", concurrency=2)
    worker = make_worker(WithoutSlots(memory_driver), registry)
    with pytest.raises(ConcurrencyUnenforceable) as refused:
        worker.initialize()
    assert refused.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE" and "capped" in str(refused.value)
    uncapped = xjobs.Registry()
    declare(uncapped, lambda ctx, i: None, name="plain")
    make_worker(WithoutSlots(memory_driver), uncapped).initialize()   # nothing to enforce: fine


def test_a_rate_window_filling_within_a_batch_sheds_in_place_and_the_tenant_is_skipped_after(driver, registry, clock):
    handle = declare(registry, lambda ctx, i: None, name="rated", tenant=lambda i: i["t"])
    ids = enqueue(handle, driver, *({"n": n, "t": "acme"} for n in range(3)))
    before = {job_id: driver.job_get(job_id).run_at for job_id in ids}
    worker = make_worker(driver, registry, concurrency=4, limits=Limits(tenant_rate=1, tenant_rate_window_ms=60_000))
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=10)
    assert pacer.totals()["shed"] == 2                  # the rate is only known to be full mid-batch
    for _ in range(5):
        pacer.pass_(advance_ms=100)                     # acme is skipped: not claimed again, not shed again
    assert (pacer.totals()["claimed"], pacer.totals()["shed"]) == (3, 2)
    waiting = [driver.job_get(job_id) for job_id in ids if driver.job_get(job_id).state == "ready"]
    assert len(waiting) == 2 and all(v.run_at == before[v.id] and v.attempt == 0 for v in waiting)
    assert driver.queue_summary()["q"].depth == 2       # still in the depth, with their age
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def _events(caplog, name: str) -> list:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_a_slot_that_cannot_be_acquired_sheds_without_running(driver, registry, monkeypatch, caplog):
    ran = []
    capped = declare(registry, lambda ctx, i: ran.append(i), name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})

    def unreachable(*args, **kwargs):
        raise ConnectionError("slot store unreachable")
    monkeypatch.setattr(driver, "slot_acquire", unreachable)
    [claimed] = driver.job_claim(Claim(["q"], 1, 30_000, "w"))
    worker = make_worker(driver, registry)
    worker.initialize()
    assert worker.take(claimed, 0.0) is None            # shed, never run unbounded
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    assert ran == [] and worker.stats().shed == 1
    [record] = _events(caplog, "worker.slot.acquire.failed")
    assert record.job_id == job_id and "unreachable" in record.error
    assert worker.admission.limiter.snapshot()["in_flight"]["global"] == 0  # type: ignore[union-attr]  # its count given back
    worker.close()


def test_a_slot_that_cannot_be_released_is_logged_and_retried_and_the_job_still_completes(
        driver, registry, monkeypatch, caplog):
    capped = declare(registry, lambda ctx, i: None, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    real = driver.slot_release
    failures: list[int] = []

    def flaky(slot):
        if not failures:
            failures.append(slot.slot)
            raise ConnectionError("connection reset")
        return real(slot)
    monkeypatch.setattr(driver, "slot_release", flaky)
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=20)
    assert driver.job_get(job_id).state == "completed"       # the release failure is not the run's
    [record] = _events(caplog, "worker.slot.release.failed")
    assert record.job == "capped" and record.slot == failures[0]
    pacer.until(lambda: driver.slot_held() == {}, advance_ms=150)    # retried with the renewals
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_a_lost_slot_is_the_stable_event_worker_slot_lost(driver, registry, caplog):
    started = threading.Event()

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
        ctx.signal.raise_if_set()
    capped = declare(registry, body, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    driver.slot_release(Slot("capped", 0, worker.identity))
    pacer.until(lambda: _events(caplog, "worker.slot.lost"), advance_ms=150)
    [record] = _events(caplog, "worker.slot.lost")
    assert (record.levelname, record.job_id, record.slot) == ("ERROR", job_id, 0)
    pacer.until(lambda: pacer.totals()["interrupted"] == 1, advance_ms=50)
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)
