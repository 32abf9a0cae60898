"""The gate (returned, never raised, in the order environment, requires, already ran), the one
projection of the ledger and the declared-against-ran report, and the cross-tenant scope a
backfill over tenant="none" holds (and nothing else does)."""

from __future__ import annotations

import contextlib

import pytest

import xjobs
from xjobs.drivers.ledger import BackfillFinish, BackfillStart
from xjobs.errors import CrossTenantDenied
from xjobs.factories.backfill_gate import gate
from xjobs.factories.backfill_report import inspect_backfills, is_pending, project, report

from .backfill_fixture import Harness, the_ledger, the_spec


@pytest.fixture
def harness(memory_driver):
    return Harness(memory_driver, rows=25)


def _completed(driver, job_id, name, checksum, rows=25):
    ledger = the_ledger(driver)
    ledger.backfill_start(BackfillStart(job_id, name, checksum, None))
    ledger.backfill_finish(BackfillFinish(job_id, "completed", rows))


def test_the_gate_returns_its_refusals_in_the_order_an_operator_acts_in(harness, memory_driver):
    spec = the_spec(harness.declare(environments=["production"], requires=lambda conn: "users.0042 is not applied"))
    _completed(memory_driver, 5, spec.name, spec.checksum)
    codes = [getattr(gate(spec, driver=memory_driver, environment=env), "code", None) for env in ("staging", "production")]
    assert codes == ["X_BACKFILL_ENVIRONMENT", "X_BACKFILL_REQUIRES"]
    met = the_spec(harness.declare(name="met", requires=lambda conn: True))
    _completed(memory_driver, 6, "met", met.checksum)
    refused = gate(met, driver=memory_driver, environment=None)
    assert refused is not None and refused.code == "X_BACKFILL_ALREADY_RAN" and "run 6" in str(refused)
    assert gate(met, driver=memory_driver, environment=None, force=True) is None
    assert gate(met, driver=object(), environment=None) is None          # no ledger: nothing ran


def test_a_precondition_that_raises_is_a_refusal_not_a_crash(harness, memory_driver):
    def broken(conn):
        raise RuntimeError("no such table")
    refused = gate(the_spec(harness.declare(requires=broken)), driver=memory_driver, environment=None)
    assert refused is not None and refused.code == "X_BACKFILL_REQUIRES" and "RuntimeError" in str(refused)
    refused = gate(the_spec(harness.declare(name="b", requires=lambda conn: False)), driver=memory_driver,
                   environment=None)
    assert refused is not None and "not met" in str(refused)


def test_only_completed_blocks_a_name(harness, memory_driver):
    spec = the_spec(harness.declare())
    ledger = the_ledger(memory_driver)
    ledger.backfill_start(BackfillStart(3, spec.name, spec.checksum, None))
    assert gate(spec, driver=memory_driver, environment=None) is None          # running: resuming
    ledger.backfill_finish(BackfillFinish(3, "failed", 10, "boom"))
    assert gate(spec, driver=memory_driver, environment=None) is None          # failed: to be retried


def test_the_one_projection_reads_no_clock_and_is_empty_without_a_ledger(harness, memory_driver, clock):
    ledger = the_ledger(memory_driver)
    ledger.backfill_start(BackfillStart(3, "a", "c", "production"))
    [running] = inspect_backfills(memory_driver)
    assert running["completed_at"] is None and running["duration_ms"] is None
    assert running["started_at"].endswith("+00:00") and running["environment"] == "production"
    clock.advance(1500)
    ledger.backfill_finish(BackfillFinish(3, "completed", 7))
    [done] = inspect_backfills(memory_driver)
    assert (done["rows"], done["duration_ms"]) == (7, pytest.approx(1500, abs=1))
    assert inspect_backfills(object()) == []
    assert project(ledger.backfill_list()[0]) == done


def test_pending_is_declared_minus_completed_excluding_running_and_excluded(harness, memory_driver):
    names = {}
    for name, options in [("done", {}), ("live", {}), ("never", {}), ("elsewhere", {"environments": ["production"]}),
                          ("failed", {})]:
        names[name] = the_spec(harness.declare(name=name, **options))
    _completed(memory_driver, 1, "done", names["done"].checksum)
    the_ledger(memory_driver).backfill_start(BackfillStart(2, "live", "x", None))
    the_ledger(memory_driver).backfill_start(BackfillStart(4, "failed", "x", None))
    the_ledger(memory_driver).backfill_finish(BackfillFinish(4, "failed", 0, "boom"))
    _completed(memory_driver, 9, "gone", "y")          # ran, and nothing declares it any more
    rows = {r["name"]: r for r in report(harness.registry, memory_driver, "staging")}
    assert {name: r["status"] for name, r in rows.items()} == {
        "done": "completed", "live": "running", "never": "pending", "elsewhere": "excluded",
        "failed": "pending", "gone": "completed"}
    assert rows["gone"]["declared"] is False and rows["done"]["last"]["job_id"] == 1
    assert [name for name, r in rows.items() if is_pending(r["status"])] == ["failed", "never"]


def test_a_backfill_over_no_tenant_sweeps_inside_a_scope_naming_it(memory_driver):
    harness = Harness(memory_driver, rows=25)
    seen: list = []
    entered: list = []

    def handle(rows):
        run = xjobs.current()
        assert run is not None
        seen.append(run.crossing)
        with run.cross_tenant("copying the template to every org"):     # replaces the reason
            seen.append(run.crossing)
        original(rows)

    @contextlib.contextmanager
    def around(ctx):        # the app's run context: entered outside the scope
        entered.append(ctx.crossing)
        yield
    harness.registry.run_context = around
    original = harness.table.handle
    harness.table.handle = handle       # type: ignore[method-assign]
    harness.enqueue(harness.declare())
    harness.run()
    assert entered == [None]
    assert seen[:2] == ["backfill 'users_email' sweeps every tenant", "copying the template to every org"]


def test_a_backfill_with_a_real_tenant_never_gets_the_scope(memory_driver):
    harness = Harness(memory_driver, rows=25)
    denied: list = []

    def handle(rows):
        run = xjobs.current()
        assert run is not None
        try:
            with run.cross_tenant("every org, please"):
                pass
        except CrossTenantDenied as exc:
            denied.append(exc.code)
    harness.table.handle = handle         # type: ignore[method-assign]
    job = harness.enqueue(harness.declare(tenant=lambda i: "acme"))
    harness.run()
    assert denied == ["X_TENANCY_CROSS_DENIED"] * 3
    assert memory_driver.job_get(job.id).state == "completed"
