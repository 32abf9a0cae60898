"""A capped run's safe window ends with its slot's as well as its lease's, on both drivers: when
the slot's renewal fails or stalls while the job's lease renewal lands, the run is told before
the slot can expire, so a second holder that takes the slot never runs beside it.

The database's clock (``clock``) and the worker's loop clock move together, by hand, one step
at a time: at each instant the worker looks first, then another process asks for the slot."""

from __future__ import annotations

import threading

import pytest

import xjobs
from xjobs.config import Settings
from xjobs.context import LEASE_LOST
from xjobs.drivers.base import SlotRequest
from xjobs.workers.leases import SLOT_WINDOW, slot_window_ms

from ..waiting import wait_for
from .pacing import Pacer, declare, enqueue, make_worker

LEASE_MS, HEARTBEAT_MS, STEP_MS = 2_000.0, 500.0, 100.0
# how long after its last landed renewal (here: when it was taken) a run trusts its slot
TRUSTED_MS = slot_window_ms(Settings(lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS))


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


class Body:
    """A capped body that runs until it is told, and says when it has stopped."""

    def __init__(self) -> None:
        self.started, self.stopped = threading.Event(), threading.Event()
        self.told: list[str | None] = []

    def __call__(self, ctx, i) -> None:
        self.started.set()
        try:
            ctx.signal.wait(30)
            self.told.append(ctx.signal.code)
            ctx.signal.raise_if_set()
        finally:
            self.stopped.set()


def _start(driver, registry, body: Body) -> tuple[Pacer, int]:
    capped = declare(registry, body, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, poll_ms=50))
    pacer.until(body.started.is_set)      # claimed, its slot taken, at instant 0 of both clocks
    pacer.pass_()                         # and renewed at 0: both renewals are due next at 500
    assert pacer.now == 0.0
    return pacer, job_id


def _step(clock, pacer: Pacer, *, pass_: bool = True) -> None:
    clock.advance(STEP_MS)
    if pass_:
        pacer.pass_(advance_ms=STEP_MS)
    else:
        pacer.now += STEP_MS


def _second_holder(driver) -> int | None:
    return driver.slot_acquire(SlotRequest("capped", 1, "another-process", 60_000))


def _until_trust_runs_out(driver, clock, pacer: Pacer, body: Body, *, passes: bool) -> None:
    """Both clocks step to the moment the run stops trusting its slot: before it, the slot
    stays its own (nobody else gets it) and its body runs on; at it, the body is told."""
    while pacer.now < TRUSTED_MS:
        assert _second_holder(driver) is None
        assert not body.stopped.is_set(), "told before its slot was in doubt"
        _step(clock, pacer, pass_=passes)
    assert pacer.now < LEASE_MS     # on the database's clock too: the slot has not expired yet
    wait_for(body.stopped.is_set, 5, "the body to be told and stop before its slot expires")
    assert body.told == [LEASE_LOST]


def _handed_back(driver, pacer: Pacer, job_id: int) -> None:
    """The stopped body's job goes back at once, attempt not counted, counted as a lost lease;
    its slot is free for another process (this worker claims nothing more here)."""
    pacer.worker.stop_accepting("test", interrupt=False)
    pacer.until(lambda: driver.job_get(job_id).state == "ready", advance_ms=10)
    view = driver.job_get(job_id)
    assert (view.attempt, view.history[-1]["outcome"]) == (0, "interrupted"), view
    assert view.history[-1]["error"].startswith(SLOT_WINDOW)
    assert pacer.worker.stats().lease_lost == 1
    assert _second_holder(driver) == 0          # the first holder is gone: the second one runs alone
    pacer.worker.close(now=lambda: pacer.now)


def test_a_failing_slot_renewal_beside_landing_lease_renewals_stops_the_run_before_the_slot_expires(
        driver, registry, clock, monkeypatch):
    body = Body()
    pacer, job_id = _start(driver, registry, body)

    def unreachable(*args, **kwargs):
        raise ConnectionError("slot renewal failed")
    monkeypatch.setattr(driver, "slot_renew", unreachable)
    _until_trust_runs_out(driver, clock, pacer, body, passes=True)   # the lease renewals land all along
    assert driver.job_get(job_id).state == "running"
    _handed_back(driver, pacer, job_id)


def test_a_slot_renewal_stalled_after_a_lease_renewal_stops_the_run_before_the_slot_expires(
        driver, registry, clock, monkeypatch):
    body = Body()
    pacer, job_id = _start(driver, registry, body)
    real, entered, release = driver.slot_renew, threading.Event(), threading.Event()

    def stalled(*args, **kwargs):
        entered.set()
        release.wait(30)
        return real(*args, **kwargs)
    monkeypatch.setattr(driver, "slot_renew", stalled)
    while pacer.now + STEP_MS < HEARTBEAT_MS:
        _step(clock, pacer)
    clock.advance(STEP_MS)
    pacer.now += STEP_MS
    stuck = threading.Thread(target=pacer.worker.run_once, args=(pacer.now,))   # renews the lease, then
    stuck.start()                                                               # stalls on the slot
    try:
        assert entered.wait(10)
        # the loop is stuck: only the lease watch looks (the lease's own window closes at 2500)
        _until_trust_runs_out(driver, clock, pacer, body, passes=False)
    finally:
        release.set()
        stuck.join(10)
    _handed_back(driver, pacer, job_id)


def test_a_slot_granted_after_a_stall_held_the_claim_is_given_back_without_starting_the_body(
        driver, registry, clock, monkeypatch, caplog):
    body = Body()
    capped = declare(registry, body, name="capped", concurrency=1)
    [job_id] = enqueue(capped, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS, poll_ms=50))
    real = driver.job_claim

    def stalled(*args, **kwargs):
        pacer.now += LEASE_MS        # the network held the claim this long: the slot comes after it
        return real(*args, **kwargs)
    monkeypatch.setattr(driver, "job_claim", stalled)
    pacer.pass_()
    assert pacer.totals()["shed"] == 1 and not body.started.is_set()   # never started on a stale slot
    view = driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    assert driver.slot_held() == {}                                     # and the slot is free again
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "worker.slot.stale"]
    assert (record.levelname, record.job_id, record.slot, record.waited_ms) == ("WARNING", job_id, 0, LEASE_MS)
    monkeypatch.setattr(driver, "job_claim", real)
    pacer.until(body.started.is_set)                                    # a fresh claim runs it
    pacer.worker.stop_accepting("test")
    pacer.until(lambda: pacer.totals()["interrupted"] == 1)
    pacer.worker.close(now=lambda: pacer.now)
