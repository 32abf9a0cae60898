"""The worker's side of crash quarantine and lease keeping, on both drivers: suspects run in
their halves with nothing else beside them, and a lease window closes on time even while the
loop is stuck."""

from __future__ import annotations

import threading
import time

import pytest

import xjobs
from xjobs.context import LEASE_LOST
from xjobs.drivers.base import Claim, WorkerExit
from xjobs.drivers.memory import MemoryDriver
from xjobs.workers.host import InProcessHost

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def test_suspects_run_apart_in_their_halves_and_everything_completes(driver, registry, clock):
    lock = threading.Lock()
    running: set[int] = set()
    overlaps: list[tuple[int, frozenset[int]]] = []
    halves: dict[int, frozenset[int]] = {}

    def body(ctx, i):
        with lock:
            running.add(ctx.job_id)
            company = frozenset(running)
        if i["suspect"] and not company <= halves[ctx.job_id]:
            overlaps.append((ctx.job_id, company))
        time.sleep(0.02)
        with lock:
            running.discard(ctx.job_id)
    handle = declare(registry, body, name="work")
    suspects = enqueue(handle, driver, *({"n": n, "suspect": True} for n in range(3)))
    driver.job_claim(Claim(["q"], 3, 30_000, "dead-worker"))
    assert {r.outcome for r in driver.job_release_worker(WorkerExit("dead-worker", how="killed by SIGKILL"))} == {"quarantined"}
    halves.update({job_id: frozenset(suspects[:2]) for job_id in suspects[:2]})
    halves[suspects[2]] = frozenset(suspects[2:])
    normal = enqueue(handle, driver, *({"n": n, "suspect": False} for n in range(3, 9)))
    pacer = Pacer(make_worker(driver, registry, concurrency=4))
    pacer.until(lambda: pacer.totals()["completed"] == 9, advance_ms=50)
    assert overlaps == []                   # no suspect ever had company but its own half
    for job_id in suspects + normal:
        view = driver.job_get(job_id)
        assert (view.state, view.crashes) == ("completed", 1 if job_id in suspects else 0)
    assert driver.job_get(suspects[0]).attempt == 1            # the crash gave its attempt back


def test_a_busy_worker_reserves_a_suspect_that_waited_and_gives_it_back_if_it_stops(driver, registry, clock):
    release = threading.Event()
    handle = declare(registry, lambda ctx, i: release.wait(10), name="block")
    [busy] = enqueue(handle, driver, {"n": 0})
    worker = make_worker(driver, registry, concurrency=2, poll_ms=50)
    pacer = Pacer(worker)
    pacer.until(lambda: driver.job_get(busy).state == "running")
    suspects = enqueue(handle, driver, {"n": 1}, {"n": 2})     # caught in some other worker's crash
    driver.job_claim(Claim(["q"], 2, 30_000, "dead"))
    driver.job_release_worker(WorkerExit("dead"))
    pacer.pass_(advance_ms=60)
    assert not worker.quarantine.holding                                # busy: it leaves fresh suspects to idle workers
    clock.advance(200)                                          # ... for two polls
    pacer.until(lambda: worker.quarantine.holding, advance_ms=60)
    [reserved] = [run.job.id for run in worker.quarantine.group]     # a half of one
    assert reserved == suspects[0] and driver.job_get(reserved).state == "running"
    assert not worker.quarantine.started                            # it waits for the busy run to end
    assert driver.job_get(suspects[1]).state == "ready"         # and claims nothing more meanwhile
    worker.stop_accepting("test", interrupt=False)
    pacer.pass_()
    view = driver.job_get(reserved)
    assert (view.state, view.attempt, view.crashes) == ("ready", 0, 1)   # given back, still a suspect
    release.set()
    pacer.until(lambda: worker.in_flight() == 0)    # the drain a host runs before the close
    worker.close()
    assert driver.job_get(busy).state == "completed"


class StallingDriver(MemoryDriver):
    """A memory driver whose lease renewals hang while ``stall`` is set: the loop thread is
    stuck in a database call, as in a network stall."""

    def __init__(self) -> None:
        super().__init__()
        self.stall = threading.Event()
        self.released = threading.Event()

    def job_renew_many(self, leases, lease_ms):
        if self.stall.is_set():
            self.released.wait(30)
        return super().job_renew_many(leases, lease_ms)


def test_a_lease_window_closes_on_time_while_the_loop_is_stuck(registry):
    driver = StallingDriver()
    seen: list[str | None] = []
    started, told = threading.Event(), threading.Event()

    def long(ctx, i):
        started.set()
        ctx.signal.wait(20)
        seen.append(ctx.signal.code)
        told.set()
    handle = declare(registry, long, name="long")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100, lease_ms=600, poll_ms=50)
    host = InProcessHost(worker).start()
    try:
        assert started.wait(10)
        driver.stall.set()                          # the next renewal hangs the loop thread
        assert told.wait(10), "the body was never told"
        assert seen == [LEASE_LOST]                 # told while the loop was still stuck
        assert not driver.released.is_set()
    finally:
        driver.released.set()
        host.stop(deadline_s=5)
    # the renewal did land in the end: the job is given back at once (fenced on its token),
    # not left to lapse a lease window later, and its attempt is not counted
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("ready", 0), view
    assert worker.stats().interrupted == 1
    assert worker.stats().lease_lost == 1       # the stall is what the loss metric shows


def test_no_suspect_is_reserved_beside_a_body_the_worker_gave_up_on(driver, registry, clock):
    release = threading.Event()
    deaf = declare(registry, lambda ctx, i: release.wait(10), name="deaf", timeout="100ms")
    quick = declare(registry, lambda ctx, i: None, name="quick")
    [stuck] = enqueue(deaf, driver, {"n": 0})
    worker = make_worker(driver, registry, concurrency=2, poll_ms=50)
    pacer = Pacer(worker)
    pacer.until(lambda: driver.job_get(stuck).state == "running")
    pacer.until(lambda: pacer.totals()["timed_out"] == 1, advance_ms=60)   # its thread runs on
    [suspect] = enqueue(quick, driver, {"n": 1})
    driver.job_claim(Claim(["q"], 1, 30_000, "dead"))
    driver.job_release_worker(WorkerExit("dead", charge="never"))
    for _ in range(5):
        clock.advance(100)
        pacer.pass_(advance_ms=100)
    assert not worker.quarantine.holding and driver.job_get(suspect).state == "ready"
    release.set()                                               # the abandoned thread ends
    pacer.until(lambda: driver.job_get(suspect).state == "completed", advance_ms=100)


def test_a_reserved_suspect_is_given_back_when_the_other_runs_outlast_a_lease(driver, registry, clock):
    release = threading.Event()
    long = declare(registry, lambda ctx, i: release.wait(10), name="long")
    [busy] = enqueue(long, driver, {"n": 0})
    worker = make_worker(driver, registry, concurrency=2, poll_ms=50, lease_ms=2000, heartbeat_ms=500)
    pacer = Pacer(worker)
    pacer.until(lambda: driver.job_get(busy).state == "running")
    [suspect] = enqueue(long, driver, {"n": 1})
    driver.job_claim(Claim(["q"], 1, 30_000, "dead"))
    driver.job_release_worker(WorkerExit("dead", charge="never"))
    clock.advance(200)
    pacer.until(lambda: worker.quarantine.holding, advance_ms=60)
    pacer.until(lambda: not worker.quarantine.holding, advance_ms=250)     # 2 s later: let go
    view = driver.job_get(suspect)
    assert (view.state, view.attempt, view.crashes) == ("ready", 0, 1)
    assert "did not end within a lease window" in view.last_error
    clock.advance(200)
    for _ in range(8):                                          # it holds off while still busy
        pacer.pass_(advance_ms=250)
        assert not worker.quarantine.holding
    release.set()
    worker.close(now=lambda: pacer.now)
