"""What a worker adds to the fleet's per-minute outcome counts (the dashboard's chart): the
runs that ended since its last report, once per report and once more at close, never twice."""

from __future__ import annotations

import pytest

import xjobs
from xjobs.drivers.memory import MemoryDriver
from xjobs.enqueue import enqueue_many
from xjobs.workers.rates import REPORT_EVERY_MS, RateReporter
from xjobs.workers.stats import WorkerStats

from .pacing import Pacer, make_worker


def counted(driver) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for point in driver.rate_series(3_600_000.0):
        totals[(point.queue, point.outcome)] = totals.get((point.queue, point.outcome), 0) + point.count
    return totals


def test_a_worker_reports_its_runs_per_queue_and_outcome(driver):
    registry = xjobs.Registry()

    @xjobs.job(registry=registry, queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
               retry=xjobs.Retry(attempts=1))
    def maybe(ctx, i):
        if i["n"] % 3 == 0:
            raise ValueError("no")

    enqueue_many(maybe, [{"n": n} for n in range(1, 10)], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] + pacer.totals()["dead"] == 9)
    pacer.pass_(REPORT_EVERY_MS)          # the next report is due
    assert counted(driver) == {("q", "completed"): 6, ("q", "dead"): 3}
    pacer.pass_(REPORT_EVERY_MS)          # nothing new: nothing added
    assert counted(driver) == {("q", "completed"): 6, ("q", "dead"): 3}
    enqueue_many(maybe, [{"n": 10}], driver=driver)
    pacer.until(lambda: pacer.totals()["completed"] == 7, advance_ms=100)
    pacer.worker.close()                  # before its next report is due: close reports it
    assert counted(driver) == {("q", "completed"): 7, ("q", "dead"): 3}


class Down:
    """A database that refuses the first report."""

    def __init__(self, driver) -> None:
        self.driver, self.calls = driver, 0

    def rate_add(self, counts) -> None:
        self.calls += 1
        if self.calls == 1:
            raise OSError("connection refused")
        self.driver.rate_add(counts)


def test_a_failed_report_goes_with_the_next_one(memory_driver: MemoryDriver):
    stats = WorkerStats()
    down = Down(memory_driver)
    reporter = RateReporter(driver=down, stats=stats, queue_of=lambda job: "q")  # type: ignore[arg-type]
    stats.outcome("send", "completed", 0.01)
    reporter.flush()                               # refused: kept
    stats.outcome("send", "completed", 0.01)
    stats.outcome("send", "shed", None)            # not a run that ended: not counted
    reporter.flush()
    assert counted(memory_driver) == {("q", "completed"): 2}
    assert down.calls == 2


@pytest.mark.parametrize("outcome", ["completed", "retried", "dead", "cancelled", "interrupted"])
def test_every_ended_outcome_is_counted(memory_driver, outcome):
    stats = WorkerStats()
    reporter = RateReporter(driver=memory_driver, stats=stats, queue_of=lambda job: "q")
    stats.outcome("send", outcome, None)
    reporter.flush()
    assert counted(memory_driver) == {("q", outcome): 1}
