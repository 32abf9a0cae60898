"""The worker and the one execution path, on both drivers, driven pass by pass."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import xjobs
from xjobs.context import CANCELLED, DRAINED
from xjobs.drivers.base import Claim
from xjobs.enqueue import enqueue_many
from xjobs.errors import InvalidOption, RetryAfter, Terminal

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def test_success_completes_and_counts(driver, registry):
    seen = []
    handle = declare(registry, lambda ctx, i: seen.append((ctx.job_id, ctx.attempt, ctx.queue, i["n"])), name="ok")
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1)
    assert seen == [(job_id, 1, "q", 1)]
    assert driver.job_get(job_id).state == "completed"
    assert pacer.totals()["jobs"] == {"ok": {"completed": 1}}


def test_failure_retries_with_backoff_then_dead_letters(driver, registry, clock):
    def boom(ctx, i):
        raise ValueError(f"boom {ctx.attempt}")
    handle = declare(registry, boom, name="boom",
                     retry=xjobs.Retry(attempts=2, delay="10s", max_delay="1m", jitter=False))
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["retried"] == 1)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("ready", 1)
    assert "ValueError: boom 1" in view.last_error and "retry 2/2 in 10.000s" in view.last_error
    assert view.run_at == pytest.approx(clock.now_ms() + 10_000, abs=1)
    clock.advance(10_000)
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("dead", 2)
    assert "attempts exhausted (2/2)" in view.last_error
    assert [h["outcome"] for h in view.history] == ["retried", "dead"]


def test_terminal_dead_letters_at_once(driver, registry):
    def fatal(ctx, i):
        raise Terminal("bad card")
    handle = declare(registry, fatal, name="fatal", retry=xjobs.Retry(attempts=5))
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1)
    view = driver.job_get(job_id)
    assert view.state == "dead" and view.attempt == 1
    assert "Terminal: bad card" in view.last_error and "terminal error" in view.last_error


def test_a_third_party_error_the_job_lists_as_terminal_dead_letters_at_once(driver, registry):
    def strict(ctx, i):
        raise KeyError("missing field") if i["n"] == 1 else ValueError("bad input")
    handle = declare(registry, strict, name="strict", retry=xjobs.Retry(attempts=5, delay=0),
                     terminal_on=(ValueError,))
    retried, dead = enqueue(handle, driver, {"n": 1}), enqueue(handle, driver, {"n": 2})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1 and pacer.totals()["retried"] >= 1)
    assert driver.job_get(dead[0]).attempt == 1 and "terminal_on" in driver.job_get(dead[0]).last_error
    assert driver.job_get(retried[0]).state in ("ready", "running")   # a KeyError follows the policy


def test_retry_after_is_clamped_by_the_policy(driver, registry, clock):
    def later(ctx, i):
        raise RetryAfter(i["s"])
    handle = declare(registry, later, name="later", retry=xjobs.Retry(attempts=5, delay="1s", max_delay="30s"))
    first, second = enqueue(handle, driver, {"n": 1, "s": 7}, {"n": 2, "s": 3600})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["retried"] == 2)
    now = clock.now_ms()
    assert driver.job_get(first).run_at == pytest.approx(now + 7_000, abs=1)
    assert driver.job_get(second).run_at == pytest.approx(now + 30_000, abs=1)


def test_drain_interrupts_without_burning_an_attempt(driver, registry):
    started = threading.Event()

    def patient(ctx, i):
        started.set()
        assert ctx.signal.wait(10)
        ctx.signal.raise_if_set()
    handle = declare(registry, patient, name="patient", retry=xjobs.Retry(attempts=1))
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    worker.stop_accepting("SIGTERM")
    run = next(iter(worker.runs.held.values()))
    assert run.signal.code == DRAINED
    pacer.until(lambda: pacer.totals()["interrupted"] == 1)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("ready", 0)
    assert "X_DRAINING" in view.last_error or "interrupted" in view.last_error
    worker.close(None)
    assert worker.closed
    assert pacer.totals()["abandoned"] == 0   # it stopped at the signal: interrupted, not abandoned


def test_a_drained_worker_claims_nothing(driver, registry):
    handle = declare(registry, lambda ctx, i: None, name="idle")
    enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    worker.stop_accepting("test")
    pacer.pass_(advance_ms=1000)
    assert pacer.totals()["claimed"] == 0


def test_cancel_reaches_a_running_job_and_it_writes_nothing(driver, registry):
    started, release = threading.Event(), threading.Event()

    def slow(ctx, i):
        started.set()
        release.wait(10)
    handle = declare(registry, slow, name="slow")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    run = worker.runs.held[job_id]
    driver.job_cancel(job_id, "operator said so")
    pacer.until(lambda: run.signal.is_set(), advance_ms=200)
    assert run.signal.code == CANCELLED
    release.set()
    pacer.until(lambda: worker.in_flight() == 0)
    view = driver.job_get(job_id)
    assert view.state == "cancelled" and view.last_error == "operator said so"
    assert pacer.totals()["cancelled"] == 1 and pacer.totals()["completed"] == 0


def test_a_lost_lease_aborts_the_run_and_its_result_is_not_written(driver, registry, clock):
    started, release = threading.Event(), threading.Event()

    def slow(ctx, i):
        started.set()
        release.wait(10)
    handle = declare(registry, slow, name="slow")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=1000, lease_ms=5000)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    clock.advance(6000)                      # the lease lapses on the database clock
    assert driver.job_rescue(10) == 1        # somebody else's sweep hands it back
    run = worker.runs.held[job_id]
    pacer.until(lambda: run.signal.is_set(), advance_ms=1000)
    assert pacer.totals()["lease_lost"] == 1
    release.set()
    # the job is delivered again (here to the same worker, as attempt 2); only that run settles
    pacer.until(lambda: pacer.totals()["completed"] == 1 and worker.in_flight() == 0, advance_ms=100)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("completed", 2)
    assert pacer.totals()["lease_lost"] == 1 and pacer.totals()["claimed"] == 2


def test_timeout_cancels_an_async_body_then_fails_the_attempt(driver, registry):
    cancelled = threading.Event()

    async def sleepy(ctx, i):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
    handle = declare(registry, sleepy, name="sleepy", timeout="200ms", retry=xjobs.Retry(attempts=3))
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["retried"] == 1, advance_ms=100)
    assert cancelled.wait(5)
    view = driver.job_get(job_id)
    assert view.state == "ready" and "timed out after 200ms" in view.last_error


def _overran(caplog) -> list:
    return [r for r in caplog.records if getattr(r, "event", None) == "job.timeout.abandoned"]


def test_timeout_of_a_sync_body_that_ignores_its_signal(driver, registry, caplog):
    release = threading.Event()
    handle = declare(registry, lambda ctx, i: release.wait(10), name="stubborn", timeout="100ms",
                     retry=xjobs.Retry(attempts=1))
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=50)
    assert driver.job_get(job_id).state == "dead"
    assert worker.in_flight() == 1           # the thread still holds its slot, honestly counted
    assert _overran(caplog) == []            # not yet known: it may still heed its signal
    pacer.until(lambda: _overran(caplog), advance_ms=250)
    [record] = _overran(caplog)
    assert (record.levelname, record.job_id, record.job) == ("WARNING", job_id, "stubborn")
    release.set()
    pacer.until(lambda: worker.in_flight() == 0)
    assert driver.job_get(job_id).state == "dead"  # the late return changed nothing
    pacer.pass_(advance_ms=2_000)
    assert len(_overran(caplog)) == 1        # said once


def test_a_timed_out_sync_body_that_heeds_its_signal_is_not_called_deaf(driver, registry, caplog):
    handle = declare(registry, lambda ctx, i: ctx.signal.wait(10), name="polite", timeout="100ms",
                     retry=xjobs.Retry(attempts=1))
    enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["dead"] == 1 and worker.in_flight() == 0, advance_ms=50)
    pacer.pass_(advance_ms=2_000)
    assert _overran(caplog) == []


def test_a_worker_never_claims_a_job_name_it_has_no_body_for(driver, registry):
    """A rolling deploy: an old worker (without job B) and a new one (with B) share a queue;
    B's jobs wait for the new worker and never burn an attempt on the old one."""
    new = xjobs.Registry()
    declare(registry, lambda ctx, i: None, name="a")                 # the old code: A only
    a = declare(new, lambda ctx, i: None, name="a")
    b = declare(new, lambda ctx, i: None, name="b")                  # the new code: A and B
    [b_id] = enqueue(b, driver, {"n": 1})
    [a_id] = enqueue(a, driver, {"n": 2})
    old_worker = Pacer(make_worker(driver, registry))
    old_worker.until(lambda: old_worker.totals()["completed"] == 1, advance_ms=100)
    old_worker.pass_(advance_ms=1000)
    view = driver.job_get(b_id)
    assert (view.state, view.attempt, view.last_error) == ("ready", 0, None)
    assert driver.job_get(a_id).state == "completed" and old_worker.totals()["claimed"] == 1
    new_worker = Pacer(make_worker(driver, new))
    new_worker.until(lambda: new_worker.totals()["completed"] == 1, advance_ms=100)
    assert driver.job_get(b_id).attempt == 1


def test_a_claim_limited_to_names_answers_only_those(driver):
    from xjobs.drivers.base import NewJob
    driver.job_enqueue([NewJob(name=n, queue="q", payload=b"{}", idempotency_key=n) for n in ("x", "y")])
    assert driver.job_claim(Claim(["q"], 10, 1000, "w", names=[])) == []
    assert [j.name for j in driver.job_claim(Claim(["q"], 10, 1000, "w", names=["y", "z"]))] == ["y"]
    with pytest.raises(InvalidOption):
        driver.job_claim(Claim(["q"], 10, 1000, "w", names="x"))
    assert [j.name for j in driver.job_claim(Claim(["q"], 10, 1000, "w"))] == ["x"]


def test_a_slow_queue_never_starves_another(driver, registry):
    release = threading.Event()
    slow = declare(registry, lambda ctx, i: release.wait(10), name="slow", queue="slow")
    fast = declare(registry, lambda ctx, i: None, name="fast", queue="fast")
    enqueue(slow, driver, *[{"n": n} for n in range(10)])
    enqueue(fast, driver, *[{"n": n} for n in range(10)])
    from xjobs.config import Settings
    from xjobs.workers.queue_worker import QueueWorker
    worker = QueueWorker(driver=driver, registry=registry, queues={"slow": 2, "fast": 2},
                         settings=Settings(poll_ms=20))
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["jobs"].get("fast", {}).get("completed") == 10, advance_ms=20)
    assert worker.runs.busy["slow"] == 2
    release.set()
    pacer.until(lambda: pacer.totals()["completed"] == 20, advance_ms=20)


def test_worker_refuses_what_it_cannot_honour(driver, registry):
    declare(registry, lambda ctx, i: None, name="plain")
    with pytest.raises(InvalidOption):
        make_worker(driver, registry, queue="nobody-uses-this").initialize()
    for bad in (float("nan"), float("inf"), -1, 2.5, 0):
        with pytest.raises(InvalidOption):
            make_worker(driver, registry, concurrency=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("queue", ["constructor", "__proto__", "toString", "x'; drop table y; --"])
def test_odd_queue_names_are_plain_data(driver, registry, queue):
    handle = declare(registry, lambda ctx, i: None, name=queue, queue=queue)
    enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry, queue=queue))
    pacer.until(lambda: pacer.totals()["completed"] == 1)
    assert driver.job_stats() == {queue: {"completed": 1}}


def test_a_failed_attempt_keeps_its_whole_traceback_in_the_history(driver, registry):
    def deep(ctx, i):
        def inner():
            raise KeyError("missing")
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError("while loading") from exc
    handle = declare(registry, deep, name="deep", retry=xjobs.Retry(attempts=2, delay=0))
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    retried, dead = driver.job_get(job_id).history
    for entry in (retried, dead):
        trace = entry["traceback"]
        assert trace.startswith("Traceback (most recent call last):") and "in inner" in trace
        assert "KeyError: 'missing'" in trace and "RuntimeError: while loading" in trace
        assert "direct cause" in trace          # the chain, not only the last exception
    assert (retried["outcome"], dead["outcome"]) == ("retried", "dead")


def test_a_huge_traceback_is_bounded_head_and_tail():
    from xjobs.workers.failures import full_traceback
    try:
        raise ValueError("start " + "x" * 40_000 + " end")
    except ValueError as exc:
        trace = full_traceback(exc)
    assert trace is not None and len(trace) < 17_000
    assert trace.startswith("Traceback (most recent call last):") and "characters cut" in trace
    assert trace.rstrip().endswith(" end")          # where it failed is kept


def test_a_manual_stop_of_the_in_process_host_lets_running_jobs_finish(driver, registry):
    from xjobs.workers.host import InProcessHost
    started, seen = threading.Event(), {}

    def steady(ctx, i):
        started.set()
        time.sleep(0.3)
        seen["signal"] = ctx.signal.code
    [job_id] = enqueue(declare(registry, steady, name="steady"), driver, {"n": 1})
    worker = make_worker(driver, registry)
    host = InProcessHost(worker).start()
    assert started.wait(10)
    host.stop()                                    # no deadline, no interrupt: it finishes
    assert seen == {"signal": None}
    assert driver.job_get(job_id).state == "completed" and worker.closed


def _failing(driver, verb: str, times: int, error: str = "the connection dropped"):
    """Make ``driver.verb`` raise its first ``times`` calls (a killed backend, a reset)."""
    original, calls = getattr(driver, verb), []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise ConnectionError(f"{error} ({verb}, call {len(calls)})")
        return original(*args, **kwargs)
    setattr(driver, verb, flaky)
    return calls


def test_a_failed_ack_is_tried_again_and_lands_without_running_the_body_again(memory_driver, registry):
    ran = []
    handle = declare(registry, lambda ctx, i: ran.append(ctx.attempt), name="fine")
    [job_id] = enqueue(handle, memory_driver, {"n": 1})
    acks = _failing(memory_driver, "job_ack_many", times=3)
    worker = make_worker(memory_driver, registry, lease_ms=1000, heartbeat_ms=500)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=20)
    view = memory_driver.job_get(job_id)
    assert (view.state, view.attempt, view.last_error) == ("completed", 1, None)
    assert ran == [1] and len(acks) == 4                 # one body; the same ack, four times
    assert pacer.totals()["settle_failed"] == 0 and pacer.totals()["retried"] == 0


def test_a_settlement_waiting_for_its_write_keeps_its_lease_while_renewals_land(memory_driver, registry, clock):
    """A write failing for longer than a lease window is not given up while the heartbeat
    still lands: nothing lapses, nothing is rescued, nothing runs twice."""
    ran = []
    handle = declare(registry, lambda ctx, i: ran.append(1), name="fine")
    [job_id] = enqueue(handle, memory_driver, {"n": 1})
    _failing(memory_driver, "job_ack_many", times=12)     # about 15 s of retries: many windows
    worker = make_worker(memory_driver, registry, lease_ms=1000, heartbeat_ms=200)
    pacer = Pacer(worker)

    def tick() -> bool:
        clock.advance(200)                       # the database's clock moves with the loop's
        assert memory_driver.job_rescue() == 0   # the lease never lapses
        return pacer.totals()["completed"] == 1
    pacer.until(tick, advance_ms=200, timeout_s=30)
    assert memory_driver.job_get(job_id).state == "completed" and ran == [1]
    assert pacer.totals()["settle_failed"] == 0


def test_a_write_is_given_up_only_when_no_renewal_landed_for_a_whole_window(memory_driver, registry, caplog):
    handle = declare(registry, lambda ctx, i: None, name="fine")
    [job_id] = enqueue(handle, memory_driver, {"n": 1})
    _failing(memory_driver, "job_ack_many", times=10_000)
    _failing(memory_driver, "job_renew_many", times=10_000)      # cut off from the database
    worker = make_worker(memory_driver, registry, lease_ms=1000, heartbeat_ms=200)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["settle_failed"] == 1, advance_ms=50)
    assert pacer.now >= 1000                          # not before the lease window closed
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "job.settle.failed"]
    assert record.levelname == "ERROR" and record.job_ids == [job_id]
    view = memory_driver.job_get(job_id)
    assert (view.state, view.last_error) == ("running", None)     # no retry decision was made
    assert pacer.totals()["retried"] == 0


def test_a_close_that_throws_still_reaches_stopped(memory_driver, registry):
    declare(registry, lambda ctx, i: None, name="fine")
    worker = make_worker(memory_driver, registry)
    worker.initialize()

    def broken_close():
        raise OSError("the socket was already gone")
    memory_driver.close = broken_close
    with pytest.raises(OSError):
        worker.close(deadline_ms=worker.clock() + 1000)
    assert worker.closed


def test_a_failed_claim_round_is_counted_and_the_worker_tries_again(memory_driver, registry):
    declare(registry, lambda ctx, i: None, name="fine")
    [job_id] = enqueue(registry.get("fine"), memory_driver, {"n": 1})
    original = memory_driver.job_claim
    failed: list[object] = []

    def flaky_claim(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise ConnectionError("the database went away")
        return original(*args, **kwargs)
    memory_driver.job_claim = flaky_claim
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert pacer.totals()["claim_failed"] == 1 and memory_driver.job_get(job_id).state == "completed"


def test_an_exhausted_retry_after_goes_dead_at_the_attempt_limit(driver, registry, clock):
    def body(ctx, i):
        raise xjobs.RetryAfter(0)                   # "try again at once", every time
    handle = declare(registry, body, name="insistent", retry=xjobs.Retry(attempts=3, delay=0, jitter=False))
    [job_id] = enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=50)
    view = driver.job_get(job_id)
    assert (view.state, view.attempt) == ("dead", 3) and "attempts exhausted (3/3)" in view.last_error
    assert pacer.totals()["retried"] == 2
