"""The shared paging loop (``xjobs/factories/paging.py``): one page per step, positional names,
a checkpoint of a cursor and two counts (never the page), checked when read back, and the
iteration rebuilt from the checkpoint when the live read disagrees with it."""

from __future__ import annotations

import pytest

import xjobs
from xjobs.errors import InvalidOption
from xjobs.factories.refusals import PageCheckpointInvalid, PageSourceInvalid
from xjobs.factories.paging import PageProgress, checkpoint_of, in_pages
from xjobs.retry import Retry
from tests.worker.pacing import Pacer, make_worker, enqueue

NO_DELAY = Retry(attempts=3, delay=0, jitter=False)


class Crash(Exception):
    """Stands in for app code failing mid-pass."""


def table(n):
    return list(range(n))


def source_over(rows, reads=None):
    def source(cursor, limit):
        if reads is not None:
            reads.append(cursor)
        start = 0 if cursor is None else cursor
        page = rows[start:start + limit]
        end = start + len(page)
        return page, (end if end < len(rows) else None)
    return source


class FakeSteps:
    """``ctx.step.run`` over a dict, so a test can re-open one step in the middle of a run."""

    def __init__(self):
        self.recorded: dict = {}
        self.used: set = set()

    def run(self, name, fn):
        assert name not in self.used
        self.used.add(name)
        if name in self.recorded:
            return self.recorded[name]
        value = fn()
        self.recorded[name] = value
        return value


class FakeCtx:
    def __init__(self, steps):
        self.step = steps

    def again(self):
        self.step.used = set()
        return self


def test_pages_are_positional_steps_recording_a_cursor_and_counts_never_rows(memory_driver):
    registry = xjobs.Registry()
    handled: list = []
    answers: list = []

    def body(ctx, i):
        answers.append(in_pages(ctx, source_over(table(25)), lambda rows, page: handled.extend(rows),
                                limit=10))
    handle = xjobs.job(registry=registry, queue="q", idempotency_key=lambda i: "k", tenant="none")(body)
    [job_id] = enqueue(handle, memory_driver, {})
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    steps = memory_driver.step_list(job_id).steps
    assert [s.name for s in steps] == ["batch:0", "batch:1", "batch:2"]
    assert [s.result for s in steps] == [{"cursor": 10, "rows": 10, "tally": 0},
                                         {"cursor": 20, "rows": 20, "tally": 0},
                                         {"cursor": None, "rows": 25, "tally": 0}]
    assert handled == table(25)
    [result] = answers
    assert (result.rows, result.pages, result.ran, result.replayed, result.cursor) == (25, 3, 3, 0, None)


def test_a_killed_attempt_resumes_at_its_checkpoint_and_the_hook_runs_only_for_pages_that_run(memory_driver):
    registry = xjobs.Registry()
    reads: list = []
    hooks: list = []
    progress: list[PageProgress] = []
    failed: list[int] = []

    def work(rows, page):
        if page == 2 and not failed:
            failed.append(page)
            raise Crash("the handler failed on page 2")
        return len(rows) * 2

    def body(ctx, i):
        in_pages(ctx, source_over(table(45), reads), work, limit=10, prefix="page",
                 before=lambda: hooks.append(ctx.attempt), on_page=progress.append)
    handle = xjobs.job(registry=registry, queue="q", idempotency_key=lambda i: "k", tenant="none",
                       retry=NO_DELAY)(body)
    [job_id] = enqueue(handle, memory_driver, {})
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert reads == [None, 10, 20, 20, 30, 40]      # page 2 read again, pages 0 and 1 never
    assert hooks == [1, 1, 1, 2, 2, 2]               # the replayed pages paid no hook
    assert [(p.index, p.ran) for p in progress] == [(0, True), (1, True), (0, False), (1, False),
                                                    (2, True), (3, True), (4, True)]
    last = memory_driver.step_list(job_id).steps[-1]
    assert last.name == "page:4" and last.result == {"cursor": None, "rows": 45, "tally": 90}


def test_an_empty_page_ends_the_pass_even_with_a_cursor():
    ctx = FakeCtx(FakeSteps())
    result = in_pages(ctx, lambda cursor, limit: ([], "more"), lambda rows, page: None, limit=5)
    assert (result.pages, result.rows, result.cursor) == (1, 0, None)


def test_the_iteration_is_rebuilt_when_a_reopened_step_moved_the_cursor():
    steps = FakeSteps()
    ctx = FakeCtx(steps)
    rows = table(40)
    in_pages(ctx, source_over(rows), lambda r, p: None, limit=10)
    # page 1 re-opened alone, and the table moved beneath it: it now ends at 15, but page 2's
    # checkpoint says 30. The next page that runs must open at 30 (the checkpoint), not at 15+10
    del steps.recorded["batch:1"], steps.recorded["batch:3"]
    reads: list = []
    moved = source_over(rows, reads)

    def source(cursor, limit):
        return (rows[10:15], 15) if cursor == 10 else moved(cursor, limit)
    result = in_pages(ctx.again(), source, lambda r, p: None, limit=10)
    assert reads == [30]
    assert result.rebuilds == 1 and result.ran == 2 and result.replayed == 2 and result.rows == 40


@pytest.mark.parametrize("recorded, why", [
    ([1, 2], "not a checkpoint"),
    ({"rows": 3, "tally": 0}, "no cursor"),
    ({"cursor": None, "rows": -1, "tally": 0}, "rows=-1"),
    ({"cursor": None, "rows": 2.5, "tally": 0}, "rows=2.5"),
    ({"cursor": None, "rows": True, "tally": 0}, "rows=True"),
    ({"cursor": None, "rows": 1}, "tally=None"),
])
def test_a_checkpoint_read_back_is_checked_not_trusted(recorded, why):
    steps = FakeSteps()
    steps.recorded["batch:0"] = recorded
    with pytest.raises(PageCheckpointInvalid, match=why) as caught:
        in_pages(FakeCtx(steps), source_over(table(3)), lambda r, p: None, limit=2)
    assert caught.value.code == "X_PAGE_CHECKPOINT_INVALID"
    # a present None is a cursor (the end marker); an absent one is not
    assert checkpoint_of({"cursor": None, "rows": 0, "tally": 0}, "batch:0") == (None, 0, 0)


@pytest.mark.parametrize("answer", [None, ([1],), ("ab", None), ([1], None, 3)])
def test_a_source_answering_something_else_is_refused(answer):
    with pytest.raises(PageSourceInvalid):
        in_pages(FakeCtx(FakeSteps()), lambda c, limit: answer, lambda r, p: None, limit=2)


@pytest.mark.parametrize("limit", [0, -1, 2.5, True, float("nan"), float("inf"), "10"])
def test_the_page_size_is_a_finite_whole_number(limit):
    with pytest.raises(InvalidOption):
        in_pages(FakeCtx(FakeSteps()), source_over(table(3)), lambda r, p: None, limit=limit)


@pytest.mark.parametrize("tally", [-1, 1.5, True, "3"])
def test_what_the_work_counts_is_a_whole_number(tally):
    with pytest.raises(InvalidOption):
        in_pages(FakeCtx(FakeSteps()), source_over(table(3)), lambda r, p: tally, limit=2)


def test_the_source_is_handed_the_cursor_as_its_checkpoint_stored_it(memory_driver):
    registry = xjobs.Registry()
    seen: list = []

    def source(cursor, limit):
        seen.append(cursor)
        return ([1], ("2026-12-01", 7)) if cursor is None else ([], None)

    def body(ctx, i):
        in_pages(ctx, source, lambda rows, page: None, limit=10)
    handle = xjobs.job(registry=registry, queue="q", idempotency_key=lambda i: "k", tenant="none")(body)
    enqueue(handle, memory_driver, {})
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert seen == [None, ["2026-12-01", 7]]
