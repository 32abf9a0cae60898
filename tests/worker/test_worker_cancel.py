"""An operator's cancel reaches the running body at the worker's next pass, on both drivers,
with no renewal due: the worker's listener hears it, and a renewal made at once confirms it.
A cancel naming nothing this worker holds costs it nothing; one nobody heard is still found
by the renewal when it comes due."""

from __future__ import annotations

import threading

import pytest

import xjobs
from xjobs.admin import cancel_jobs
from xjobs.context import CANCELLED
from xjobs.drivers.base import Cancels, ListFilter
from xjobs.drivers.memory_jobs import IdleListener

from .pacing import HOUR, Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def counting_renewals(driver) -> list[int]:
    """Each ``job_renew_many`` the driver is asked for, by how many leases it renews."""
    calls: list[int] = []
    real = driver.job_renew_many

    def renew(leases, lease_ms):
        calls.append(len(leases))
        return real(leases, lease_ms)
    driver.job_renew_many = renew
    return calls


def waiting_body(registry, name: str = "waits"):
    started, seen = threading.Event(), threading.Event()

    def waits(ctx, i):
        started.set()
        if ctx.signal.wait(30):
            seen.set()
    return declare(registry, waits, name=name), started, seen


def test_a_cancel_reaches_the_body_with_no_renewal_due(driver, registry):
    handle, started, seen = waiting_body(registry)
    [job_id] = enqueue(handle, driver, {"n": 1})
    # the hand clock never moves: no renewal comes due and no lease window closes
    worker = make_worker(driver, registry, heartbeat_ms=HOUR, lease_ms=2 * HOUR)
    renewals = counting_renewals(driver)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    run = worker.runs.held[job_id]
    before = len(renewals)
    driver.job_cancel(job_id, "operator said so")
    pacer.until(seen.is_set)
    assert run.signal.code == CANCELLED
    assert renewals[before:] == [1]            # one renewal, made at once, confirmed it
    pacer.until(lambda: worker.in_flight() == 0)
    assert driver.job_get(job_id).state == "cancelled"
    assert pacer.totals()["cancelled"] == 1 and pacer.totals()["lease_lost"] == 0


def test_a_bulk_cancel_reaches_every_body_it_cancelled(driver, registry):
    bodies = [waiting_body(registry, f"waits{n}") for n in range(3)]
    ids = [enqueue(handle, driver, {"n": n})[0] for n, (handle, _, _) in enumerate(bodies)]
    worker = make_worker(driver, registry, heartbeat_ms=HOUR, lease_ms=2 * HOUR)
    pacer = Pacer(worker)
    pacer.until(lambda: all(started.is_set() for _, started, _ in bodies))
    cancel_jobs(driver, ListFilter(queue="q"), by="test", batch=2)
    pacer.until(lambda: all(seen.is_set() for _, _, seen in bodies))
    assert {driver.job_get(i).state for i in ids} == {"cancelled"}


def test_a_cancel_naming_no_run_held_here_makes_no_renewal(driver, registry):
    handle, started, _ = waiting_body(registry)
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=HOUR, lease_ms=2 * HOUR)
    renewals = counting_renewals(driver)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    before = len(renewals)
    worker.leases.recall(Cancels(frozenset({job_id + 1000})))   # a job this worker does not hold
    pacer.pass_()
    assert renewals[before:] == []
    worker.leases.recall(Cancels(every=True))                     # no job named: check them all
    pacer.pass_()
    assert renewals[before:] == [1]
    assert not worker.runs.held[job_id].signal.is_set()          # still its job: nothing to tell
    worker.stop_accepting("test")
    pacer.until(lambda: worker.in_flight() == 0)


def test_a_cancel_nobody_heard_is_found_by_the_next_renewal(driver, registry):
    handle, started, seen = waiting_body(registry)
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=1000, lease_ms=5000)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    run = worker.runs.held[job_id]
    assert worker._listener is not None
    worker._listener.close()
    worker._listener = IdleListener()          # a listener that hears nothing
    driver.job_cancel(job_id, "operator said so")
    pacer.pass_()
    assert not run.signal.is_set()             # no renewal due yet, nothing heard
    pacer.until(seen.is_set, advance_ms=250)   # the renewal comes due on the hand clock
    assert run.signal.code == CANCELLED
