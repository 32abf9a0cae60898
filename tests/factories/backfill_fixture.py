"""The one harness the backfill pass tests share: an app table held in memory, a ``source``
over it, a ``handle`` that records what it swept (and can fail once on a chosen batch, raising
``HandleFailure``, a plain ``Exception``: it stands in for app code, which the pass propagates
as it is), a worker to run passes on, and the ledger's rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import xjobs
from xjobs.drivers.ledger import BackfillLedger, ledger_of
from xjobs.factories.backfill import BackfillSpec, spec_of
from xjobs.enqueue import enqueue_many
from xjobs.retry import Retry
from tests.worker.pacing import Pacer, make_worker

NO_DELAY = Retry(attempts=3, delay=0, jitter=False)


class HandleFailure(Exception):
    """What the app's handle raised; deliberately no xjobs error."""


@dataclass
class Table:
    rows: int
    fail_on_batch: int | None = None      # the handle raises once, the first time it sees it
    swept: list[int] = field(default_factory=list)
    reads: list[Any] = field(default_factory=list)
    batches_handled: int = 0
    failed: bool = False

    def source(self, cursor, limit):
        self.reads.append(cursor)
        start = 0 if cursor is None else cursor
        end = min(start + limit, self.rows)
        return list(range(start, end)), (end if end < self.rows else None)

    def handle(self, rows):
        batch = self.batches_handled
        self.batches_handled += 1
        if batch == self.fail_on_batch and not self.failed:
            self.failed = True
            raise HandleFailure(f"the app failed on batch {batch}")
        self.swept.extend(rows)

    def left(self, ctx):
        return self.rows - len(set(self.swept))


class Harness:
    def __init__(self, driver, **table):
        self.driver = driver
        self.registry = xjobs.Registry()
        self.table = Table(**table)
        self.pacer: Pacer | None = None

    def declare(self, name="users_email", **options):
        options.setdefault("batch", 10)
        options.setdefault("rate", 1_000_000)
        options.setdefault("tenant", "none")
        options.setdefault("retry", NO_DELAY)
        options.setdefault("queue", "q")
        return xjobs.backfill(name=name, source=self.table.source, handle=self.table.handle,
                              registry=self.registry, **options)

    def enqueue(self, handle, force=False):
        return enqueue_many(handle, [{"force": True} if force else {}], driver=self.driver)[0]

    def run(self, until_settled: int = 1):
        if self.pacer is None:
            self.pacer = Pacer(make_worker(self.driver, self.registry))
        pacer = self.pacer
        base = self.settled()
        pacer.until(lambda: self.settled() - base >= until_settled, advance_ms=100)
        return pacer.totals()

    def settled(self) -> int:
        if self.pacer is None:
            return 0
        totals = self.pacer.totals()
        return totals["completed"] + totals["dead"]

    def ledger(self, name=None):
        ledger = ledger_of(self.driver)
        assert ledger is not None
        return ledger.backfill_list(name)


def the_ledger(driver) -> BackfillLedger:
    ledger = ledger_of(driver)
    assert ledger is not None
    return ledger


def the_spec(handle) -> BackfillSpec:
    spec = spec_of(handle)
    assert spec is not None
    return spec
