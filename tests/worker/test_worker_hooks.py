"""``xjobs.on_worker_start``/``on_worker_stop`` in a worker hosted here, on both drivers: the
start hooks before the first claim and the stop hooks at the close, an async hook on the
loop the async bodies run on, a raising start hook stopping the worker with its code, a
failing or hanging stop hook logged while the close goes on. The daemon's side (a child
restarted with its back-off) is tests/daemon/test_daemon_worker_hooks.py."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

import xjobs
from xjobs import testing
from xjobs.config import Settings
from xjobs.drivers.base import ListFilter
from xjobs.errors import InvalidOption, WorkerStartFailed
from xjobs.tick import run_tick
from xjobs.workers.host import InProcessHost

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry():
    return xjobs.Registry()


def _events(caplog, name):
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def test_start_hooks_build_what_bodies_use_and_stop_hooks_let_go_in_reverse(driver, registry):
    calls: list[str] = []
    client: dict[str, object] = {}

    def open_pool():
        calls.append("open pool")
        client["pool"] = f"pool of thread {threading.get_ident()}"

    def open_http():
        calls.append("open http")
    xjobs.on_worker_start(open_pool, registry=registry)
    xjobs.on_worker_start(open_http, registry=registry)
    xjobs.on_worker_start(open_pool, registry=registry)     # the same function twice is one hook
    xjobs.on_worker_stop(lambda: calls.append("close pool"), registry=registry)
    xjobs.on_worker_stop(lambda: calls.append("close http"), registry=registry)

    @declare(registry)
    def uses(ctx, i):
        calls.append("body")
        return client["pool"]

    enqueue(uses, driver, {"n": 1}, {"n": 2})
    worker = make_worker(driver, registry)
    assert calls == []                       # built, not started: nothing runs at construction
    pacer = Pacer(worker)
    assert calls == ["open pool", "open http"]
    pacer.until(lambda: pacer.totals()["completed"] == 2)
    worker.stop_accepting("test")
    worker.close()
    assert calls == ["open pool", "open http", "body", "body", "close http", "close pool"]


def test_an_async_hook_runs_on_the_loop_the_async_bodies_run_on(driver, registry):
    loops: dict[str, object] = {}

    async def open_client():
        loops["hook"] = asyncio.get_running_loop()

    async def close_client():
        loops["stop"] = asyncio.get_running_loop()
    xjobs.on_worker_start(open_client, registry=registry)
    xjobs.on_worker_stop(close_client, registry=registry)

    @declare(registry)
    async def body(ctx, i):
        loops["body"] = asyncio.get_running_loop()

    enqueue(body, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 1)
    worker.close()
    assert loops["hook"] is loops["body"] is loops["stop"]


def test_a_raising_start_hook_stops_the_worker_before_it_claims(driver, registry, caplog):
    stopped: list[str] = []

    def connect():
        raise ConnectionError("the SDK's endpoint refused us")
    xjobs.on_worker_start(connect, registry=registry)
    xjobs.on_worker_stop(lambda: stopped.append("stop"), registry=registry)

    @declare(registry)
    def body(ctx, i):
        raise AssertionError("never runs")

    [job_id] = enqueue(body, driver, {"n": 1})
    host = InProcessHost(make_worker(driver, registry))
    with caplog.at_level(logging.ERROR, logger="xjobs.worker"), pytest.raises(WorkerStartFailed) as raised:
        host.run()
    assert raised.value.code == "X_WORKER_START_FAILED"
    assert "connect" in str(raised.value) and "ConnectionError" in str(raised.value)
    [logged] = _events(caplog, "worker.start_hook.failed")
    assert logged.hook.endswith("connect") and "refused us" in logged.error
    assert driver.job_get(job_id).state == "ready" and driver.job_list(ListFilter(state="running")) == []
    assert stopped == []            # nothing was built, so nothing is let go of


def test_a_failing_or_hanging_stop_hook_is_logged_and_the_close_goes_on(driver, registry, caplog):
    hung, ran = threading.Event(), []

    def hang():
        hung.wait(30)

    def boom():
        raise RuntimeError("already closed")
    xjobs.on_worker_stop(lambda: ran.append("first declared, last run"), registry=registry)
    xjobs.on_worker_stop(hang, registry=registry)
    xjobs.on_worker_stop(boom, registry=registry)
    declare(registry, lambda ctx, i: None, name="idle")
    worker = make_worker(driver, registry, worker_stop_timeout_ms=100.0)
    Pacer(worker)
    with caplog.at_level(logging.WARNING, logger="xjobs.worker"):
        worker.close()
    hung.set()
    failed = {r.hook.rsplit(".", 1)[-1]: r.error for r in _events(caplog, "worker.stop_hook.failed")}
    assert failed == {"boom": "raised RuntimeError: already closed", "hang": "did not return within 0.1s"}
    assert ran == ["first declared, last run"]


def test_hooks_are_refused_unless_callable_without_arguments_and_travel_with_the_registry(registry):
    with pytest.raises(InvalidOption, match="on_worker_start.*no arguments"):
        xjobs.on_worker_start(lambda pool: None, registry=registry)   # type: ignore[type-var]
    with pytest.raises(InvalidOption, match="on_worker_stop"):
        xjobs.on_worker_stop("close", registry=registry)   # type: ignore[type-var]

    def start():
        pass
    xjobs.on_worker_start(start, registry=registry)
    saved = registry.snapshot()
    registry.restore(xjobs.Registry())
    assert registry.worker_start == []
    registry.restore(saved)
    assert registry.worker_start == [start]


def test_a_tick_runs_the_hooks_once_around_its_pass_and_a_refused_start_fails_it(memory_driver, registry):
    calls: list[str] = []
    xjobs.on_worker_start(lambda: calls.append("start"), registry=registry)
    xjobs.on_worker_stop(lambda: calls.append("stop"), registry=registry)
    handle = declare(registry, lambda ctx, i: calls.append("body"), name="ticked")
    enqueue(handle, memory_driver, {"n": 1}, {"n": 2})
    summary = run_tick(driver=memory_driver, registry=registry, settings=Settings(), deadline_s=30)
    assert calls == ["start", "body", "body", "stop"] and summary.jobs["ticked"] == {"completed": 2}

    def refused():
        raise PermissionError("no key")
    xjobs.on_worker_start(refused, registry=registry)
    [job_id] = enqueue(handle, memory_driver, {"n": 3})
    with pytest.raises(WorkerStartFailed, match="refused"):
        run_tick(driver=memory_driver, registry=registry, settings=Settings(), deadline_s=30)
    assert memory_driver.job_get(job_id).state == "ready"


def test_run_until_idle_runs_the_hooks_around_each_call(memory_driver, registry):
    calls: list[str] = []
    xjobs.on_worker_start(lambda: calls.append("start"), registry=registry)
    xjobs.on_worker_stop(lambda: calls.append("stop"), registry=registry)
    handle = declare(registry, lambda ctx, i: calls.append("body"), name="tested")
    enqueue(handle, memory_driver, {"n": 1})
    testing.run_until_idle(driver=memory_driver, registry=registry)
    testing.run_until_idle(driver=memory_driver, registry=registry)
    assert calls == ["start", "body", "stop", "start", "stop"]
