"""Fair claims through a worker, on both drivers: one tenant's backlog does not hold back
another's jobs (they are served in turn, by weight), the same jobs in a queue claimed in
arrival order wait behind it, and rows of a fair queue that carry no key still run."""

from __future__ import annotations

import threading

import pytest

import xjobs
from xjobs.drivers.base import NewJob

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


class Served:
    """The tenant of each body, in the order they started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[str] = []

    def body(self, ctx, i):
        with self.lock:
            self.order.append(ctx.tenant)


def skew(handle, driver, a: int = 12, b: int = 3) -> None:
    enqueue(handle, driver, *({"t": "a", "n": n} for n in range(a)))
    enqueue(handle, driver, *({"t": "b", "n": n} for n in range(b)))


def drain(driver, registry, served: Served, total: int) -> None:
    pacer = Pacer(make_worker(driver, registry, concurrency=1))
    pacer.until(lambda: len(served.order) == total and pacer.totals()["completed"] == total)
    pacer.worker.close()


def test_a_backlog_does_not_hold_back_another_tenants_jobs(driver, registry):
    served = Served()
    handle = declare(registry, served.body, name="fair", tenant=lambda i: i["t"], fairness="tenant")
    skew(handle, driver)
    drain(driver, registry, served, 15)
    assert served.order[:6] == ["a", "b", "a", "b", "a", "b"]   # in turn while both have work
    assert served.order[6:] == ["a"] * 9


def test_in_arrival_order_the_same_jobs_wait_behind_the_backlog(driver, registry):
    served = Served()
    handle = declare(registry, served.body, name="fifo", tenant=lambda i: i["t"])
    skew(handle, driver)
    drain(driver, registry, served, 15)
    assert served.order == ["a"] * 12 + ["b"] * 3


def test_a_weight_gives_a_tenant_more_turns(driver, registry):
    served = Served()
    handle = declare(registry, served.body, name="fair", tenant=lambda i: i["t"], fairness="tenant",
                     fair_weights={"a": 2})
    skew(handle, driver, a=12, b=4)
    drain(driver, registry, served, 16)
    assert served.order[:8] == ["a", "b", "a", "a", "b", "a", "a", "b"]


def test_a_key_function_shares_claims_by_what_it_answers(driver, registry):
    served = Served()
    handle = declare(registry, served.body, name="fair", tenant=lambda i: i["t"],
                     fairness=lambda i: i["account"])
    enqueue(handle, driver, *({"t": "a", "account": "big", "n": n} for n in range(6)))
    enqueue(handle, driver, {"t": "b", "account": "small", "n": 100})
    view = driver.job_get(1)
    assert view.fair_key == "big"
    drain(driver, registry, served, 7)
    assert served.order[:2] == ["a", "b"]


def test_rows_of_a_fair_queue_without_a_key_still_run(driver, registry):
    served = Served()
    declare(registry, served.body, name="fair", tenant=lambda i: i["t"], fairness="tenant")
    # as a row written before the job declared fairness, or by older code, carries no key
    driver.job_enqueue([NewJob(name="fair", queue="q", payload=b'{"t": "old", "n": 1}',
                               idempotency_key="old", tenant="old")])
    drain(driver, registry, served, 1)
    assert served.order == ["old"]
