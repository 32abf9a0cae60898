"""ctx.step through a real QueueWorker on both drivers: run and replay, the one write fence,
parks (sleep, wait_for_event), step timeouts, names, and the def/async parity."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading

import pytest

import xjobs
from xjobs.enqueue import enqueue_many
from xjobs.errors import Aborted, InvalidOption, StepDuplicate, StepResultInvalid
from xjobs.retry import Retry
from xjobs.steps import MAX_TRACE_NAMES

from .pacing import Pacer, make_worker

NO_DELAY = Retry(attempts=3, delay=0, jitter=False)


@pytest.fixture
def registry():
    return xjobs.Registry()


def declare(registry, fn, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_DELAY)
    return xjobs.job(registry=registry, **options)(fn)


def enqueue(handle, driver, n=1):
    return enqueue_many(handle, [{"n": n}], driver=driver)[0].id


def steps_of(driver, job_id):
    return {s.name: s for s in driver.step_list(job_id).steps}


def test_a_recorded_step_is_replayed_and_a_failed_one_runs_again(driver, registry):
    calls = {"a": 0, "b": 0, "c": 0}
    seen: list = []

    def body(ctx, i):
        def a():
            calls["a"] += 1
            return (1, 2.5, {"k": None})
        first = ctx.step.run("a", a)

        def b():
            calls["b"] += 1
            if calls["b"] == 1:
                raise ValueError("flaky")
            return "ok"
        try:
            second = ctx.step.run("b", b)
        except ValueError as exc:   # the caller sees the body's own error, never bookkeeping's
            seen.append(exc)
            raise
        ctx.step.run("c", lambda: calls.__setitem__("c", calls["c"] + 1))
        seen.append((first, second))
    job_id = enqueue(declare(registry, body, name="flow"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert calls == {"a": 1, "b": 2, "c": 1}
    assert isinstance(seen[0], ValueError) and str(seen[0]) == "flaky"
    assert seen[1] == ([1, 2.5, {"k": None}], "ok")   # the stored shape, on the first run too
    recorded = steps_of(driver, job_id)
    assert [s.name for s in driver.step_list(job_id).steps] == ["a", "b", "c"]   # as recorded
    assert recorded["a"].attempt == 1 and recorded["b"].attempt == 2
    assert recorded["a"].result == [1, 2.5, {"k": None}] and recorded["c"].result is None
    view = driver.job_get(job_id)
    assert view.state == "completed" and view.attempt == 2 and view.last_error is None
    assert "flaky" in view.history[0]["error"]   # the failed attempt's error, kept in its row
    # recorded bodies (a failing one records nothing), and the one replay on attempt 2
    assert pacer.totals()["steps_run"] == 3 and pacer.totals()["steps_replayed"] == 1


def test_duplicate_names_are_refused_past_the_trace(driver, registry):
    outcome: dict = {}

    def body(ctx, i):
        for n in range(MAX_TRACE_NAMES + 50):
            ctx.step.run(f"s{n}", lambda: None)
        outcome["trace"] = ctx.step.trace
        try:
            ctx.step.run("s0", lambda: None)   # scrolled out of the trace long ago
        except StepDuplicate as exc:
            outcome["code"] = exc.code
    job_id = enqueue(declare(registry, body, name="many"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert outcome["code"] == "X_STEP_DUPLICATE"
    assert len(outcome["trace"]) == MAX_TRACE_NAMES and outcome["trace"][-1] == f"s{MAX_TRACE_NAMES + 49}"
    assert len(driver.step_list(job_id).steps) == MAX_TRACE_NAMES + 50


def test_a_result_json_cannot_hold_is_refused_before_anything_is_written(driver, registry):
    codes: list[str] = []

    def body(ctx, i):
        for bad in ({1, 2}, math.nan, object()):
            try:
                ctx.step.run(f"bad-{len(codes)}", lambda bad=bad: bad)
            except StepResultInvalid as exc:
                codes.append(exc.code)
    job_id = enqueue(declare(registry, body, name="bad"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert codes == ["X_STEP_RESULT_INVALID"] * 3
    assert driver.step_list(job_id).steps == ()


def test_async_bodies_await_the_same_steps(driver, registry):
    calls = {"co": 0, "plain": 0}

    async def body(ctx, i):
        async def co():
            calls["co"] += 1
            await asyncio.sleep(0)
            return {"via": "coroutine"}

        def plain():
            calls["plain"] += 1
            return 7
        a = await ctx.step.run("co", co)
        b = await ctx.step.run("plain", plain)
        if ctx.attempt == 1:
            raise RuntimeError("once more")
        assert (a, b) == ({"via": "coroutine"}, 7)
    job_id = enqueue(declare(registry, body, name="async_flow"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert calls == {"co": 1, "plain": 1}
    assert driver.job_get(job_id).attempt == 2


def test_a_sleep_parks_without_an_attempt_and_wakes_on_the_database_clock(driver, registry, clock):
    ran: list[object] = []

    def body(ctx, i):
        ctx.step.run("before", lambda: ran.append("before"))
        ctx.step.sleep("nap", "2s")
        ran.append(("after", ctx.attempt))
    job_id = enqueue(declare(registry, body, name="napper"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["suspended"] == 1, advance_ms=100)
    view = driver.job_get(job_id)
    assert view.state == "suspended" and view.attempt == 0 and view.last_error is None
    assert steps_of(driver, job_id)["nap"].state == "sleeping"
    pacer.pass_(advance_ms=1000)        # the worker's wake timer runs; the database says not yet
    assert driver.job_get(job_id).state == "suspended"
    clock.advance(2001)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=300)
    assert ran == ["before", ("after", 1)]
    view = driver.job_get(job_id)
    assert view.attempt == 1 and steps_of(driver, job_id)["nap"].state == "completed"
    assert pacer.totals()["steps_woke"] == 1 and pacer.totals()["steps_replayed"] == 1


def test_waits_get_events_sent_before_during_and_by_key(driver, registry, clock):
    """A wait takes the first event of its key sent since its job was enqueued: before the
    wait began or while it was parked; one from before the job existed is not its."""
    got: dict = {}

    def body(ctx, i):
        got[i["n"]] = ctx.step.wait_for_event("paid", "order.paid", key=f"o-{i['n']}", timeout="1h")
    handle = declare(registry, body, name="waiter")
    xjobs.send_event("order.paid", key="o-3", payload={"stale": True}, driver=driver)  # before job 3 existed
    clock.advance(1)
    first, second, late = enqueue(handle, driver, 1), enqueue(handle, driver, 2), enqueue(handle, driver, 3)
    xjobs.send_event("order.paid", key="o-1", payload={"amount": 1}, driver=driver)   # before the wait
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1 and pacer.totals()["suspended"] == 2, advance_ms=100)
    assert got == {1: {"amount": 1}}
    sent = xjobs.send_event("order.paid", key="o-2", payload={"amount": 2}, driver=driver)   # during
    assert sent.woken == 1 and driver.job_get(late).state == "suspended"
    pacer.until(lambda: pacer.totals()["completed"] == 2, advance_ms=100)
    assert got == {1: {"amount": 1}, 2: {"amount": 2}}
    clock.advance(3_600_001)            # the third one's timeout
    pacer.until(lambda: pacer.totals()["completed"] == 3, advance_ms=300)
    assert got[3] is None and steps_of(driver, late)["paid"].timed_out   # the stale event is not its
    assert pacer.totals()["steps_delivered"] == 2 and pacer.totals()["steps_timed_out"] == 1
    assert [driver.job_get(j).attempt for j in (first, second, late)] == [1, 1, 1]


@pytest.mark.parametrize("how", ["cancelled", "lease lost"])
def test_a_run_that_lost_its_job_mid_step_writes_nothing(driver, registry, clock, how):
    inside, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def body(ctx, i):
        ctx.step.run("first", lambda: 1)

        def slow():
            inside.set()
            release.wait(10)
            return 2
        try:
            ctx.step.run("second", slow)
        except Aborted as exc:
            outcome["refused"] = exc.code
            raise
        ctx.step.run("third", lambda: outcome.setdefault("third ran", True))
    job_id = enqueue(declare(registry, body, name="victim"), driver)
    pacer = Pacer(make_worker(driver, registry, lease_ms=1000, heartbeat_ms=900))
    pacer.until(inside.is_set)
    driver.queue_pause("q", True)    # nobody claims it again: the database's fence is what refuses
    if how == "cancelled":
        driver.job_cancel(job_id, "operator")
    else:
        clock.advance(1001)
        assert driver.job_rescue() == 1      # somebody else's sweep took the job back
    release.set()
    pacer.until(lambda: "refused" in outcome, advance_ms=100)
    assert outcome == {"refused": "X_ABORTED"}
    assert list(steps_of(driver, job_id)) == ["first"]
    if how == "cancelled":   # counted as the operator's cancel, not as a lost lease
        pacer.until(lambda: pacer.totals()["cancelled"] == 1, advance_ms=100)
        assert pacer.totals()["lease_lost"] == 0


def test_a_step_timeout_cancels_the_step_then_fails_the_attempt(driver, registry):
    stopped, outcome = threading.Event(), {}

    def body(ctx, i):
        def stuck():
            ctx.signal.wait(10)        # cooperative: returns once the step is cancelled
            stopped.set()
            return "too late"
        try:
            ctx.step.run("stuck", stuck)
        except Aborted as exc:
            outcome["code"] = exc.details.get("cause")
    handle = declare(registry, body, name="stuck", step_timeout="500ms",
                     retry=Retry(attempts=1, delay=0, jitter=False))
    job_id = enqueue(handle, driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    assert stopped.wait(5)
    pacer.until(lambda: "code" in outcome, advance_ms=100)
    assert outcome["code"] == "X_STEP_TIMEOUT"
    view = driver.job_get(job_id)
    assert "X_STEP_TIMEOUT" in view.last_error and driver.step_list(job_id).steps == ()


def test_a_leftover_thread_writes_nothing_once_the_run_settled(driver, registry):
    go, outcome = threading.Event(), {}

    def body(ctx, i):
        def later():
            go.wait(10)
            try:
                ctx.step.run("late", lambda: 1)
            except Aborted as exc:
                outcome["code"] = exc.details.get("cause")
        threading.Thread(target=later, daemon=True).start()
    job_id = enqueue(declare(registry, body, name="leaky"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    go.set()
    pacer.until(lambda: "code" in outcome, advance_ms=100)
    assert outcome["code"] == "X_JOB_SETTLED" and driver.step_list(job_id).steps == ()


@pytest.mark.parametrize("option", ["step_timeout", "event_poll"])
@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "soon"])
def test_step_knobs_must_be_positive_and_finite(registry, option, value):
    with pytest.raises(InvalidOption) as err:
        declare(registry, lambda ctx, i: None, name="knob", **{option: value})
    assert err.value.code == "X_INVALID_OPTION" and option in str(err.value)


@pytest.mark.parametrize("duration", [math.nan, math.inf, -1, "forever"])
def test_a_sleep_of_no_finite_length_is_refused(memory_driver, registry, duration):
    codes = []

    def body(ctx, i):
        try:
            ctx.step.sleep("nap", duration)
        except InvalidOption as exc:
            codes.append(exc.code)
    enqueue(declare(registry, body, name="bad_nap"), memory_driver)
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert codes == ["X_INVALID_OPTION"]


def test_run_until_idle_moves_the_clock_through_a_sleep_and_inline_bodies_have_no_steps(registry):
    from xjobs import testing

    def body(ctx, i):
        ctx.step.sleep("a day", "1d")
        ctx.step.run("after", lambda: None)
    handle = declare(registry, body, name="day_sleeper")
    with testing.memory_queue() as queue:
        job_id = handle.enqueue({"n": 1}).id
        summary = testing.run_until_idle("q", registry=registry, with_scheduled=True)
        assert summary.jobs == {"day_sleeper": {"suspended": 1, "completed": 1}}
        assert summary.advanced_ms >= 86_400_000
        assert queue.job_get(job_id).attempt == 1
    with pytest.raises(xjobs.XJobsError) as err:
        testing.run_inline(handle, {"n": 1})
    assert err.value.code == "X_NOT_CONFIGURED"


def test_after_its_transaction_completed_the_job_a_run_writes_no_step(driver, registry):
    outcome = {}

    def body(ctx, i):
        with ctx.transaction():
            pass
        try:
            ctx.step.run("late", lambda: 1)
        except Aborted as exc:
            outcome["cause"] = exc.details["cause"]
    job_id = enqueue(declare(registry, body, name="done_early"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert outcome == {"cause": "X_JOB_COMPLETED"} and driver.step_list(job_id).steps == ()
    assert pacer.totals()["lease_lost"] == 0


def test_send_event_refuses_what_a_wait_could_not_tell_from_a_timeout(memory_driver):
    with pytest.raises(xjobs.XJobsError) as err:
        xjobs.send_event("order.paid", key="o-1", payload=None, driver=memory_driver)
    assert err.value.code == "X_PAYLOAD_INVALID"
    for bad in ("", "a\x00b", "x" * 300):
        with pytest.raises(InvalidOption):
            xjobs.send_event(bad, driver=memory_driver)
    assert xjobs.send_event("order.paid", driver=memory_driver).woken == 0   # payload {} by default


@pytest.mark.postgres
def test_event_poll_bounds_a_park_through_a_real_worker(pg_driver, clock):
    """``job(event_poll=)`` reaches the driver through the worker: an event stored without a
    send (nothing wakes the waiter) is found once the poll comes round, not at the timeout."""
    registry = xjobs.Registry()
    got = []

    def body(ctx, i):
        got.append(ctx.step.wait_for_event("w", "order.paid", key="o-1", timeout="1h"))
    handle = xjobs.job(queue="q", idempotency_key=lambda i: "one", tenant="none", registry=registry,
                       name="polling", event_poll="2s")(body)
    [job] = enqueue_many(handle, [{}], driver=pg_driver)
    pacer = Pacer(make_worker(pg_driver, registry))
    parked_at = clock.now_ms()
    pacer.until(lambda: pg_driver.job_get(job.id).state == "suspended")
    assert pg_driver.job_get(job.id).run_at == pytest.approx(parked_at + 2_000, abs=50)   # the poll, not the hour
    with pg_driver.connect() as conn:
        conn.execute(f"insert into {pg_driver.schema}.events (name, key, payload, sent_at) "
                     "values ('order.paid', 'o-1', '{\"by\": \"hand\"}', to_timestamp(%s / 1000.0))",
                     (clock.now_ms(),))
    clock.advance(2_000)
    assert pg_driver.job_wake(10) == 1
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=50)
    assert got == [{"by": "hand"}]


def test_a_resume_at_step_500_reads_the_jobs_steps_once_per_attempt(driver, registry, clock):
    """The replay of 500 recorded steps costs ONE read of the job's steps, whatever their count;
    the first attempt, a first claim, has none to read and makes no read."""
    reads: list[int] = []
    real = driver.step_list

    def counted(job_id, *args, **kwargs):
        reads.append(job_id)
        return real(job_id, *args, **kwargs)
    driver.step_list = counted
    ran = []

    def body(ctx, i):
        for n in range(500):
            ctx.step.run(f"s{n}", lambda n=n: ran.append(n) or n)  # type: ignore[func-returns-value]
        ctx.step.sleep("nap", "1m")
        ctx.step.run("last", lambda: None)
    job_id = enqueue(declare(registry, body, name="long"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job_id).state == "suspended", advance_ms=100)
    assert reads == []                              # the first attempt: no read at all
    clock.advance(60_000)
    driver.job_wake(10)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert reads == [job_id]                        # the resume at step 500: one read, not 501
    assert ran == list(range(500))                  # and no step ran twice


def test_sleeps_and_waits_are_replayed_by_name_through_the_trace(driver, registry, clock):
    from xjobs.events import send_event
    traces: list[tuple[str, ...]] = []

    def body(ctx, i):
        ctx.step.sleep("nap", "1m")
        ctx.step.wait_for_event("paid", "order.paid", key="o-1")
        traces.append(ctx.step.trace)
        try:
            ctx.step.sleep("nap", "1m")             # one name, one step, replayed or not
        except StepDuplicate as exc:
            traces.append((exc.code,))
    job_id = enqueue(declare(registry, body, name="flow"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job_id).state == "suspended", advance_ms=100)
    clock.advance(60_000)
    driver.job_wake(10)
    pacer.until(lambda: driver.job_get(job_id).state == "suspended" and
                [s.name for s in driver.step_list(job_id).steps] == ["nap", "paid"], advance_ms=100)
    send_event("order.paid", key="o-1", driver=driver)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert traces == [("nap", "paid"), ("X_STEP_DUPLICATE",)]


def test_an_attempt_reads_its_recorded_steps_once_however_many_it_replays(driver, registry, monkeypatch):
    reads: list[int] = []
    read = driver.step_list

    def counted(job_id, *rest):
        reads.append(job_id)
        return read(job_id, *rest)
    monkeypatch.setattr(driver, "step_list", counted)
    ran: list[str] = []

    def step(n):
        ran.append(f"s{n}")
        return n

    def body(ctx, i):
        for n in range(40):
            ctx.step.run(f"s{n}", lambda n=n: step(n))
            if n == 24 and ctx.attempt == 1:
                raise ValueError("half way")
    job_id = enqueue(declare(registry, body, name="long"), driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    assert reads == [job_id]     # one read for the resume at step 25; none for the first claim
    assert ran == [f"s{n}" for n in range(40)]   # the 25 recorded steps replayed, never rerun
    assert pacer.totals()["steps_replayed"] == 25


class _Named:
    """A cursor of the steps' pool that notes the name of each statement it is given."""

    def __init__(self, cur, made: list[str]) -> None:
        self._cur, self._made = cur, made

    def execute(self, query, *args, **kwargs):
        self._made.append(query.split("*/", 1)[0].removeprefix("/* xjobs:").strip())
        return self._cur.execute(query, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._cur, name)


def test_a_first_attempt_reads_no_step_on_the_server_and_a_retry_reads_once(pg_driver, registry, monkeypatch):
    """Counted where the statements go out, on the steps' pool: the first claims' steps are
    writes alone; the second attempt of the job that failed reads its recorded steps once."""
    db = pg_driver.database
    made: list[str] = []
    real = db.step_cursor

    @contextlib.contextmanager
    def step_cursor():
        with real() as cur:
            yield _Named(cur, made)
    monkeypatch.setattr(db, "step_cursor", step_cursor)

    def body(ctx, i):
        for n in range(3):
            ctx.step.run(f"s{n}", lambda n=n: n)
        if i["n"] == 0 and ctx.attempt == 1:
            raise ValueError("once more")
    handle = declare(registry, body, name="three")
    for n in range(4):
        enqueue(handle, pg_driver, n)
    pacer = Pacer(make_worker(pg_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 4, advance_ms=100)
    reads = [name for name in made if name.startswith("step_list")]
    assert len(reads) == 1 and set(made) - set(reads) <= {"step_put", "step_put_many"}
    assert pacer.totals()["steps_run"] == 12 and pacer.totals()["steps_replayed"] == 3
