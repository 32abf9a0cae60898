"""A backfill pass on the memory driver: its steps and checkpoints, at least once, the replay that
writes no ledger row, the environment refused before the ledger, count's parsed verdict, and the
ordinary job handle it is."""

from __future__ import annotations

import logging
import math

import pytest

import xjobs
from xjobs import manifest
from xjobs.enqueue import enqueue_many
from xjobs.drivers.ledger import BackfillFinish, BackfillStart
from xjobs.errors import InvalidOption
from xjobs.factories.backfill import declared, spec_of
from xjobs.factories.backfill_pass import parse_count

from .backfill_fixture import Harness, the_ledger, the_spec


@pytest.fixture
def harness(memory_driver):
    return Harness(memory_driver, rows=45)


def test_a_pass_sweeps_every_row_one_batch_per_step_recording_a_cursor_and_counts(harness, memory_driver, caplog):
    handle = harness.declare()
    job = harness.enqueue(handle)
    with caplog.at_level(logging.INFO, logger="xjobs.backfill"):
        harness.run()
    [done] = [r for r in caplog.records if getattr(r, "event", None) == "backfill.completed"]
    assert (done.backfill, done.rows, done.batches, done.ran, done.replayed) == ("users_email", 45, 5, 5, 0)
    assert harness.table.swept == list(range(45))
    steps = memory_driver.step_list(job.id).steps
    assert [s.name for s in steps] == [f"batch:{n}" for n in range(5)]
    assert steps[-1].result == {"cursor": None, "rows": 45, "tally": 0}    # never the rows
    [run] = harness.ledger()
    assert (run.job_id, run.name, run.state, run.rows) == (job.id, "users_email", "completed", 45)
    assert run.completed_at is not None and run.checksum == the_spec(handle).checksum
    view = memory_driver.job_get(job.id)
    assert view.state == "completed" and view.idempotency_key == "backfill:users_email"


def test_handle_runs_before_its_checkpoint_so_a_failed_batch_runs_again_and_replays_write_no_ledger_row(
        memory_driver, monkeypatch):
    harness = Harness(memory_driver, rows=45, fail_on_batch=2)
    handle = harness.declare()
    calls: list = []
    ledger = the_ledger(memory_driver)
    real = ledger.backfill_progress

    def progress(job_id, rows):
        calls.append(rows)
        return real(job_id, rows)
    monkeypatch.setattr(ledger, "backfill_progress", progress)
    job = harness.enqueue(handle)
    harness.run()
    assert harness.table.reads == [None, 10, 20, 20, 30, 40]       # batch 2 read twice, 0 and 1 once
    assert sorted(set(harness.table.swept)) == list(range(45))
    assert calls == [10, 20, 30, 40, 45]     # the replayed batches 0 and 1 wrote nothing
    [run] = harness.ledger()
    assert (run.state, run.rows, run.error, run.completed_at is not None) == ("completed", 45, None, True)
    history = memory_driver.job_get(job.id).history
    assert "HandleFailure" in history[0]["error"]      # the app's own error, propagated as it is


def test_a_failed_attempt_is_recorded_failed_and_its_retry_adopts_the_row(memory_driver, monkeypatch):
    harness = Harness(memory_driver, rows=45, fail_on_batch=3)
    handle = harness.declare()
    seen: list = []
    ledger = the_ledger(memory_driver)
    real = ledger.backfill_start

    def start(begin):
        seen.append([(r.state, r.rows, r.completed_at is not None) for r in ledger.backfill_list()])
        return real(begin)
    monkeypatch.setattr(ledger, "backfill_start", start)
    harness.enqueue(handle)
    harness.run()
    assert seen == [[], [("failed", 30, True)]]     # the swept rows kept through the failure
    [run] = harness.ledger()
    assert run.state == "completed"


def test_the_wrong_environment_is_refused_before_the_ledger_and_dead_at_once(harness, memory_driver):
    handle = harness.declare(environments=["production"])
    job = harness.enqueue(handle)
    with _environment("staging"):
        harness.run()
    assert harness.ledger() == [] and harness.table.reads == []
    view = memory_driver.job_get(job.id)
    assert view.state == "dead" and "X_BACKFILL_ENVIRONMENT" in view.last_error


def test_a_completed_name_blocks_the_next_pass_and_force_runs_a_new_one(harness, memory_driver, caplog):
    handle = harness.declare()
    first = harness.enqueue(handle)
    harness.run()
    again = harness.enqueue(handle)
    assert again.id != first.id and not again.deduped
    with caplog.at_level(logging.INFO, logger="xjobs.backfill"):
        harness.run()
    assert harness.table.reads == [None, 10, 20, 30, 40]         # nothing swept again
    assert [r.job_id for r in harness.ledger()] == [first.id]
    assert memory_driver.job_get(again.id).state == "completed"
    assert _events(caplog) == ["backfill.skipped"]
    forced = harness.enqueue(handle, force=True)
    harness.run()
    assert [(r.job_id, r.state) for r in harness.ledger()] == [(first.id, "completed"), (forced.id, "completed")]
    assert memory_driver.job_get(forced.id).idempotency_key == "backfill:users_email"   # force is not in the key


def test_a_moved_checksum_warns_and_still_does_not_run(harness, memory_driver, caplog):
    handle = harness.declare()
    job = harness.enqueue(handle)
    harness.run()
    ledger = the_ledger(memory_driver)
    ledger.backfill_start(BackfillStart(job.id, "users_email", "an older text", None))
    ledger.backfill_finish(BackfillFinish(job.id, "completed", 45))
    harness.enqueue(handle)
    with caplog.at_level(logging.INFO, logger="xjobs.backfill"):
        harness.run()
    assert _events(caplog) == ["backfill.checksum.moved", "backfill.skipped"]
    assert len(harness.table.reads) == 5


def test_one_live_pass_per_name_forced_or_not(harness):
    handle = harness.declare()
    first = harness.enqueue(handle)
    forced = harness.enqueue(handle, force=True)
    assert forced.deduped and forced.id == first.id


def test_a_count_that_never_converges_is_stalled_and_recorded_failed(memory_driver):
    harness = Harness(memory_driver, rows=45)
    handle = harness.declare(count=lambda ctx: 3)
    job = harness.enqueue(handle)
    harness.run()
    view = memory_driver.job_get(job.id)
    assert view.state == "dead" and "X_BACKFILL_STALLED" in view.last_error     # terminal: a retry replays
    [run] = harness.ledger()
    assert (run.state, run.rows) == ("failed", 45) and "BackfillStalled" in run.error


def test_a_count_that_converges_completes(memory_driver):
    harness = Harness(memory_driver, rows=45)
    harness.enqueue(harness.declare(count=harness.table.left))
    harness.run()
    assert harness.ledger()[0].state == "completed"


@pytest.mark.parametrize("answer", [math.nan, -1, True, "0", None, 1.5, math.inf])
def test_what_count_answers_is_parsed_never_trusted(answer):
    with pytest.raises(InvalidOption):
        parse_count(answer, "b")
    assert parse_count(0, "b") == 0 and parse_count(2.0, "b") == 2


def test_a_backfill_is_an_ordinary_job_stamped_and_derived_from_the_registry(harness):
    handle = harness.declare()
    plain = xjobs.job(registry=harness.registry, queue="q", idempotency_key=lambda i: "k", tenant="none",
                      name="plain")(lambda ctx, i: None)
    assert isinstance(handle, xjobs.JobHandle) and harness.registry.get("users_email") is handle
    assert [h.name for h, _ in declared(harness.registry)] == ["users_email"] and spec_of(plain) is None
    rows = {row["name"]: row for row in manifest.describe(harness.registry)["jobs"]}
    assert rows["users_email"]["cross_tenant"] is True and rows["plain"]["cross_tenant"] is False
    with pytest.raises(xjobs.XJobsError) as err:
        enqueue_many(handle, [{"force": "yes"}], driver=harness.driver)
    assert err.value.code == "X_JOB_INPUT_INVALID"


@pytest.mark.parametrize("option, value", [
    ("rate", 0), ("rate", -1), ("rate", math.nan), ("rate", math.inf), ("rate", True), ("rate", "5"),
    ("batch", 0), ("batch", 2.5), ("batch", True), ("batch", math.inf), ("batch", -3),
    ("environments", "production"), ("environments", []), ("environments", [""]),
    ("count", 3), ("requires", "alembic"), ("tenant", None),
])
def test_bad_knobs_are_refused_at_declaration(harness, option, value):
    with pytest.raises(InvalidOption):
        harness.declare(**{option: value})


def test_the_checksum_leaves_batch_and_rate_out(harness):
    a = the_spec(harness.declare(name="a", batch=10, rate=5))
    b = the_spec(harness.declare(name="b", batch=500, rate=50))
    assert a.checksum == b.checksum and len(a.checksum) == 64


class _environment:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        import os
        self.before = os.environ.get("XJOBS_ENVIRONMENT")
        os.environ["XJOBS_ENVIRONMENT"] = self.name
        from xjobs import config
        self.saved = config._settings
        config._settings = None
        return self

    def __exit__(self, *exc):
        import os
        from xjobs import config
        config._settings = self.saved
        if self.before is None:
            os.environ.pop("XJOBS_ENVIRONMENT", None)
        else:
            os.environ["XJOBS_ENVIRONMENT"] = self.before


def _events(caplog):
    return [r.event for r in caplog.records if getattr(r, "event", "").startswith("backfill.")]


def test_a_pass_retried_from_a_step_reopens_the_source_at_the_checkpoint_and_adopts_its_row(harness, memory_driver):
    handle = harness.declare()
    job = harness.enqueue(handle)
    harness.run()
    [before] = harness.ledger()
    memory_driver.step_reopen(job.id, "batch:2")       # jobs retry --from-step batch:2
    harness.table.reads.clear()
    harness.run()
    assert harness.table.reads == [20, 30, 40]        # from batch 1's checkpoint, nothing before it
    [after] = harness.ledger()
    assert (after.job_id, after.state, after.rows, after.started_at) == (job.id, "completed", 45, before.started_at)
    assert after.completed_at is not None and after.completed_at >= before.completed_at


def test_the_scope_is_the_pass_run_never_the_worker(harness, memory_driver):
    denied: list = []

    def plain(ctx, i):
        try:
            with ctx.cross_tenant("after the backfill, on the same worker"):
                pass
        except xjobs.XJobsError as exc:
            denied.append(exc.code)
    after = xjobs.job(registry=harness.registry, queue="q", idempotency_key=lambda i: "k", tenant="none",
                      name="after")(plain)
    harness.enqueue(harness.declare())
    harness.run()
    enqueue_many(after, [{}], driver=memory_driver)
    harness.run()
    assert denied == ["X_TENANCY_CROSS_DENIED"]


async def _async_handle(rows):
    return None


def test_an_async_function_is_refused_where_the_pass_calls_it_synchronously(harness):
    for option in ("handle", "source", "count"):
        given = {"source": harness.table.source, "handle": harness.table.handle, option: _async_handle}
        with pytest.raises(InvalidOption, match="def function"):
            xjobs.backfill(name="x", tenant="none", registry=harness.registry, **given)


def test_two_backfills_under_one_name_are_refused_and_one_declared_twice_is_one(harness):
    first = harness.declare()
    again = harness.declare()                       # the same functions: a module imported twice
    assert harness.registry.get("users_email") is again and first is not again

    def other(rows):
        pass
    with pytest.raises(xjobs.XJobsError) as err:
        xjobs.backfill(name="users_email", source=harness.table.source, handle=other, tenant="none",
                       registry=harness.registry)
    assert err.value.code == "X_JOB_DUPLICATE"


def test_a_driver_without_a_ledger_runs_passes_unbooked(harness, memory_driver):
    memory_driver.backfills = None
    handle = harness.declare()
    harness.enqueue(handle)
    harness.run()
    harness.enqueue(handle)
    harness.run()                                  # nothing recorded it, so nothing blocks it
    assert harness.table.reads == [None, 10, 20, 30, 40] * 2
