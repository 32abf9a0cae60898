"""The backfill ledger (``driver.backfills``) on both drivers: one row per run, adopt keeps the
start and clears the completion, progress is absolute and only on a running row."""

from __future__ import annotations

import pytest

from xjobs.drivers.ledger import BackfillFinish, BackfillStart, ledger_of
from xjobs.errors import InvalidOption


def test_a_run_is_started_progressed_finished_and_adopted_by_its_retry(driver, clock):
    ledger = ledger_of(driver)
    assert ledger is not None
    started = ledger.backfill_start(BackfillStart(7, "users_email", "abc", "production"))
    assert (started.job_id, started.name, started.state, started.rows, started.completed_at) == (
        7, "users_email", "running", 0, None)
    assert started.started_at == pytest.approx(clock.now_ms(), abs=1)
    assert ledger.backfill_progress(7, 3000) is True
    clock.advance(5000)
    assert ledger.backfill_finish(BackfillFinish(7, "failed", 3500, "boom")) is True
    [failed] = ledger.backfill_list("users_email")
    assert (failed.state, failed.rows, failed.error) == ("failed", 3500, "boom")
    assert failed.completed_at == pytest.approx(started.started_at + 5000, abs=1)
    assert ledger.backfill_progress(7, 4000) is False          # not running: nothing written
    clock.advance(5000)
    adopted = ledger.backfill_start(BackfillStart(7, "users_email", "abc", "production"))
    assert (adopted.state, adopted.completed_at, adopted.error, adopted.rows) == ("running", None, None, 3500)
    assert adopted.started_at == started.started_at            # the pass began then
    assert ledger.backfill_finish(BackfillFinish(7, "completed", 9000)) is True
    # a forced pass is another job: another row, the first one kept as history
    ledger.backfill_start(BackfillStart(9, "users_email", "abd", None))
    ledger.backfill_start(BackfillStart(8, "accounts", "x", None))
    assert [(r.name, r.job_id, r.state) for r in ledger.backfill_list()] == [
        ("accounts", 8, "running"), ("users_email", 7, "completed"), ("users_email", 9, "running")]
    assert [r.job_id for r in ledger.backfill_list("users_email")] == [7, 9]
    assert ledger.backfill_finish(BackfillFinish(404, "completed", 1)) is False


@pytest.mark.parametrize("call", [
    lambda l: l.backfill_start(BackfillStart(0, "n", "c", None)),
    lambda l: l.backfill_start(BackfillStart(1, " n", "c", None)),
    lambda l: l.backfill_start(BackfillStart(1, "n", "", None)),
    lambda l: l.backfill_progress(1, -1),
    lambda l: l.backfill_progress(1, True),
    lambda l: l.backfill_finish(BackfillFinish(1, "running", 1)),
    lambda l: l.backfill_finish(BackfillFinish(1, "completed", 1.5)),  # type: ignore[arg-type]
])
def test_the_ledger_refuses_what_can_never_be_right(driver, call):
    ledger = ledger_of(driver)
    assert ledger is not None
    with pytest.raises(InvalidOption):
        call(ledger)


def test_a_driver_without_a_ledger_has_none():
    assert ledger_of(object()) is None
