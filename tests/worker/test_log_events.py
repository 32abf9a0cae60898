"""Every stable log event: documented once (``xjobs.logs`` and the table of docs/guides/logs.md agree with
what the code emits), and each one asserted by a test, here or beside the behaviour it names.

The events of rare failures are provoked here by making one driver verb raise, on both
drivers; each test asserts the name, the level and the fields an alert would key on.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pytest

import xjobs
from xjobs import logs
from xjobs.config import Settings
from xjobs.drivers.base import Claim, Slot, SlotRequest
from xjobs.workers.scanning import run_due_scans
from xjobs.workers.scheduler import ELECTION
from xjobs.workers.upkeep import Upkeep

from .pacing import HOUR, Pacer, declare, enqueue, make_worker, scheduler

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"^[a-z]+(?:\.[a-z_]+)+$")


def _documented() -> list[str]:
    table = logs.__doc__.split("::", 1)[1].split('"""')[0]
    return [line.split()[0] for line in table.splitlines()
            if line.startswith("    ") and not line.startswith("     ") and _NAME.match(line.split()[0])]


def _emitted() -> set[str]:
    names = set()
    for path in (ROOT / "xjobs").rglob("*.py"):
        text = path.read_text()
        names.update(re.findall(r'event\(log, logging\.[A-Z]+, "([a-z_.]+)"', text))
        names.update(re.findall(r'"event": "([a-z_.]+)"', text))
    return names


def test_the_code_the_module_doc_and_the_logs_page_name_the_same_events():
    documented = _documented()
    assert len(documented) == len(set(documented)) and len(documented) > 30
    assert set(documented) == _emitted()
    page = set(re.findall(r"^\| `([a-z_.]+)` \|", (ROOT / "docs" / "guides" / "logs.md").read_text(), re.MULTILINE))
    assert page == set(documented)


def test_every_documented_event_is_asserted_by_a_test():
    quoted = "".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py") if p.name != Path(__file__).name)
    quoted += Path(__file__).read_text().split("# -- the events", 1)[1]
    missing = [name for name in _documented() if f'"{name}"' not in quoted]
    assert missing == [], f"documented events no test asserts: {missing}"


# -- the events ------------------------------------------------------------------------------------

def _events(caplog, name: str) -> list:
    return [r for r in caplog.records if getattr(r, "event", None) == name]


def _raising(target, verb: str, error: str = "the server went away"):
    def fail(*args, **kwargs):
        raise ConnectionError(error)
    setattr(target, verb, fail)


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def test_a_completed_attempt_and_a_shed_are_debug_events(driver, registry, caplog):
    caplog.set_level(logging.DEBUG, logger="xjobs")
    capped = declare(registry, lambda ctx, i: None, name="capped", concurrency=1)
    [first, second] = enqueue(capped, driver, {"n": 1}, {"n": 2})
    driver.slot_acquire(SlotRequest("capped", 1, "another-machine", 60_000))
    claimed = driver.job_claim(Claim(["q"], 1, 30_000, "w"))
    worker = make_worker(driver, registry)
    worker.initialize()
    assert worker.take(claimed[0], 0.0) is None
    [shed] = _events(caplog, "job.shed")
    assert (shed.levelname, shed.job_id) == ("DEBUG", claimed[0].id) and "held" in shed.why
    driver.slot_release(Slot("capped", 0, "another-machine"))
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 2, advance_ms=50)
    assert sorted(r.job_id for r in _events(caplog, "job.attempt.completed")) == sorted([first, second])
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_failed_renewals_are_warnings_until_the_window_closes_then_the_lease_is_lost(driver, registry, caplog):
    started = threading.Event()

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
    handle = declare(registry, body, name="long")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, lease_ms=600, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    _raising(driver, "job_renew_many")
    pacer.until(lambda: _events(caplog, "job.lease.lost"), advance_ms=100)
    failed = _events(caplog, "job.lease.renew.failed")
    assert failed and all(r.levelname == "WARNING" and r.count == 1 for r in failed)
    [lost] = _events(caplog, "job.lease.lost")
    assert (lost.levelname, lost.job_id, lost.job) == ("ERROR", job_id, "long")
    assert "whole lease window" in lost.why
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_a_job_cancelled_while_it_runs_is_the_cancelled_event(driver, registry, caplog):
    caplog.set_level(logging.INFO, logger="xjobs")
    started = threading.Event()

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
    handle = declare(registry, body, name="long")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    driver.job_cancel(job_id)
    pacer.until(lambda: _events(caplog, "job.cancelled"), advance_ms=150)
    [record] = _events(caplog, "job.cancelled")
    assert (record.levelname, record.job_id) == ("INFO", job_id)
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_a_failed_claim_is_a_warning_and_the_worker_goes_on(driver, registry, caplog):
    handle = declare(registry, lambda ctx, i: None, name="fine")
    enqueue(handle, driver, {"n": 1})
    real = driver.job_claim
    _raising(driver, "job_claim")
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.pass_()
    [record] = _events(caplog, "worker.claim.failed")
    assert record.levelname == "WARNING" and record.queue == "q" and "went away" in record.error
    driver.job_claim = real
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_a_body_still_running_at_the_close_deadline_is_abandoned_by_name(driver, registry, caplog):
    started, release = threading.Event(), threading.Event()

    def deaf(ctx, i):
        started.set()
        release.wait(10)
    handle = declare(registry, deaf, name="deaf")
    [job_id] = enqueue(handle, driver, {"n": 1})
    worker = make_worker(driver, registry)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    worker.stop_accepting("drain")
    worker.close(deadline_ms=pacer.now, now=lambda: pacer.now)
    release.set()
    [record] = _events(caplog, "worker.drain.abandoned")
    assert (record.levelname, record.count, record.job_ids) == ("WARNING", 1, [job_id])


def test_a_failed_slot_renewal_is_a_warning(driver, registry, caplog):
    started = threading.Event()

    def body(ctx, i):
        started.set()
        ctx.signal.wait(10)
    capped = declare(registry, body, name="capped", concurrency=1)
    enqueue(capped, driver, {"n": 1})
    worker = make_worker(driver, registry, heartbeat_ms=100)
    pacer = Pacer(worker)
    pacer.until(started.is_set)
    real = driver.slot_renew
    _raising(driver, "slot_renew")
    pacer.until(lambda: _events(caplog, "worker.slot.renew.failed"), advance_ms=150)
    [record, *_] = _events(caplog, "worker.slot.renew.failed")
    assert (record.levelname, record.job, record.slot) == ("WARNING", "capped", 0)
    driver.slot_renew = real
    worker.stop_accepting("test")
    worker.close(now=lambda: pacer.now)


def test_cross_tenant_work_is_logged_with_its_reason(driver, registry, caplog):
    def body(ctx, i):
        with ctx.cross_tenant("month-end report over every org"):
            pass
    handle = declare(registry, body, name="report", cross_tenant=True)
    enqueue(handle, driver, {"n": 1})
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=50)
    [record] = _events(caplog, "job.cross_tenant")
    assert record.levelname == "WARNING" and record.reason == "month-end report over every org"


def test_a_scan_that_raises_is_the_scan_failed_event(driver, registry, caplog):
    def expire(ctx):
        raise RuntimeError("the trials table is locked")
    xjobs.scan(name="expire", every="5m", fn=expire, registry=registry)
    assert driver.leader_elect(ELECTION, "a", 10_000)
    [run] = run_due_scans(driver, registry, election=ELECTION, holder="a")
    assert not run.ok
    [record] = _events(caplog, "scan.failed")
    assert (record.levelname, record.scan) == ("ERROR", "expire") and "locked" in record.error


def test_the_schedulers_failures_are_named_events(driver, registry, clock, caplog):
    digest = xjobs.job(queue="reports", idempotency_key=lambda i: "d", tenant="none",
                       registry=registry, name="digest")(lambda ctx, i: None)
    xjobs.task(name="hourly", cron="0 * * * *", tz="UTC", job=digest, input={}, registry=registry,
               catch_up="run-all", max_catch_up=2)
    xjobs.scan(name="sweep", every="5m", fn=lambda ctx: None, registry=registry)
    role = scheduler(driver, registry, "a", leader_lease_ms=100 * HOUR)
    role.tick()
    clock.advance(5 * HOUR)
    assert role.tick().dispatched == 2               # two of five, the rest skipped by name
    [skipped] = _events(caplog, "scheduler.occurrences.skipped")
    assert (skipped.levelname, skipped.task, skipped.skipped, skipped.max_catch_up) == ("WARNING", "hourly", 3, 2)

    clock.advance(HOUR)
    _raising(driver, "schedule_dispatch")
    role.tick()
    [dispatch] = _events(caplog, "scheduler.dispatch.failed")
    assert (dispatch.levelname, dispatch.task) == ("ERROR", "hourly")
    role._run_scans()
    [scans] = _events(caplog, "scan.round.failed")
    assert scans.levelname == "WARNING"
    del driver.schedule_dispatch                     # the class's verb again
    _raising(driver, "schedule_state")
    role.tick()
    [state] = _events(caplog, "scheduler.schedule.failed")
    assert state.levelname == "WARNING"
    del driver.schedule_state
    _raising(driver, "leader_elect")
    role.tick()
    [election] = _events(caplog, "scheduler.election.failed")
    assert election.levelname == "WARNING" and not role.is_leader
    del driver.leader_elect
    assert role.tick().leader
    _raising(driver, "leader_resign")
    role.stop_accepting("drain")
    role.close(None)
    [resign] = _events(caplog, "scheduler.resign.failed")
    assert (resign.levelname, resign.holder) == ("WARNING", "a")


def test_a_failed_upkeep_chore_is_a_warning_and_waits_for_its_timer(memory_driver, caplog):
    _raising(memory_driver, "job_rescue")
    upkeep = Upkeep(driver=memory_driver, settings=Settings(), who="scheduler s", count=lambda name, n: None)
    upkeep.run(0.0)
    [record] = _events(caplog, "upkeep.failed")
    assert (record.levelname, record.chore, record.by) == ("WARNING", "rescuing lapsed leases", "scheduler s")


@pytest.mark.postgres
def test_each_applied_migration_is_the_schema_migrated_event(pg_dsn, pg_schema, caplog):
    from xjobs.drivers.postgres import PostgresDriver
    from xjobs.drivers.sql import SCHEMA_VERSION
    caplog.set_level(logging.INFO, logger="xjobs")
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    try:
        driver.migrate()
    finally:
        driver.close()
    applied = _events(caplog, "schema.migrated")
    assert [r.version for r in applied] == list(range(1, SCHEMA_VERSION + 1))
    assert all(r.levelname == "INFO" and r.schema == pg_schema and r.seconds >= 0 for r in applied)
