"""``xjobs.testing``: each helper on the memory driver; run_until_idle and the enqueued
assertions on both drivers (the ``driver`` fixture), since they must not depend on which."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest

import xjobs
from xjobs import testing
from xjobs.clock import ManualClock
from xjobs.context import RunSignal
from xjobs.drivers.memory import MemoryDriver
from xjobs.enqueue import enqueue_many
from xjobs.errors import Aborted, InvalidOption, PayloadInvalid, RetryAfter, Terminal


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def declare(registry, fn, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    options.setdefault("tenant", "none")
    return xjobs.job(registry=registry, **options)(fn)


# -- run_inline -----------------------------------------------------------------------------------

def test_run_inline_gives_a_real_ctx_and_the_input_as_a_worker_would(registry):
    def body(ctx, input):
        ctx.log.info("running")
        return (ctx.job_id, ctx.attempt, ctx.queue, ctx.tenant, ctx.name, ctx.signal.is_set(), input)
    handle = declare(registry, body, name="greet", queue="mail", tenant=lambda i: i["org"])
    got = testing.run_inline(handle, {"n": 1, "org": "acme", "pair": (1, 2)}, attempt=3, job_id=42)
    # a tuple comes back a list, as it does from the queue's jsonb column
    assert got == (42, 3, "mail", "acme", "greet", False, {"n": 1, "org": "acme", "pair": [1, 2]})
    assert testing.run_inline(handle, {"n": 1, "org": "acme"}, tenant="other")[3] == "other"


def test_run_inline_raises_what_the_body_raised_and_checks_input_like_enqueue(registry):
    def body(ctx, input):
        raise Terminal("card declined")
    handle = declare(registry, body, tenant=lambda i: i["org"])
    with pytest.raises(Terminal, match="card declined"):
        testing.run_inline(handle, {"n": 1, "org": "a"})
    with pytest.raises(PayloadInvalid):
        testing.run_inline(handle, {"n": 1, "org": "a", "x": float("nan")})
    with pytest.raises(xjobs.XJobsError) as err:
        testing.run_inline(handle, {"n": 1, "org": ""})
    assert err.value.code == "X_JOB_TENANT_REQUIRED"


def test_run_inline_runs_an_async_body_on_a_fresh_loop_even_inside_a_running_one(registry):
    async def body(ctx, input):
        await asyncio.sleep(0)
        return input["n"] * 2, ctx.attempt
    handle = declare(registry, body)
    assert testing.run_inline(handle, {"n": 21}) == (42, 1)

    async def async_test():
        return testing.run_inline(handle, {"n": 2}, attempt=2)
    assert asyncio.run(async_test()) == (4, 2)


def test_run_inline_signal_is_one_the_test_can_abort(registry):
    def body(ctx, input):
        started.set()
        if ctx.signal.wait(10):
            ctx.signal.raise_if_set()
        return "finished"
    handle = declare(registry, body)
    started, signal = threading.Event(), RunSignal()

    def abort():
        started.wait(10)
        signal.abort("X_DRAINING", "test says stop")
    threading.Thread(target=abort).start()
    with pytest.raises(Aborted) as err:
        testing.run_inline(handle, {"n": 1}, signal=signal)
    assert err.value.code == "X_ABORTED" and "test says stop" in str(err.value)


def test_run_inline_transaction_without_a_connection_is_a_coded_error(registry):
    def body(ctx, input):
        with ctx.transaction():
            pass
    handle = declare(registry, body)
    with pytest.raises(testing.NoTransaction) as err:
        testing.run_inline(handle, {"n": 1})
    assert err.value.code == "X_INLINE_NO_TRANSACTION" and "conn=" in str(err.value)


@pytest.mark.postgres
def test_run_inline_transaction_with_a_connection_writes_in_a_savepoint(registry, pg_dsn, pg_schema):
    def body(ctx, input):
        with ctx.transaction() as conn:
            conn.execute(f"insert into {pg_schema}.t values (%s)", (input["n"],))
        if input.get("fail_after"):
            raise RuntimeError("after commit")
    handle = declare(registry, body)
    with psycopg.connect(pg_dsn) as conn:   # the test's own transaction, rolled back at the end
        conn.execute(f"create schema {pg_schema}")
        conn.execute(f"create table {pg_schema}.t (n int)")
        testing.run_inline(handle, {"n": 1}, conn=conn)
        with pytest.raises(RuntimeError):
            testing.run_inline(handle, {"n": 2, "fail_after": True}, conn=conn)
        assert conn.execute(f"select n from {pg_schema}.t order by n").fetchall() == [(1,), (2,)]
        conn.rollback()


@pytest.mark.postgres
def test_run_inline_on_a_fresh_connection_writes_in_the_tests_transaction(registry, pg_dsn, pg_schema):
    def body(ctx, input):
        with ctx.transaction() as conn:
            conn.execute(f"insert into {pg_schema}.t values (%s)", (input["n"],))
    handle = declare(registry, body)
    with psycopg.connect(pg_dsn, autocommit=True) as setup:
        setup.execute(f"create schema {pg_schema}")
        setup.execute(f"create table {pg_schema}.t (n int)")
    with psycopg.connect(pg_dsn) as conn:      # no statement run yet: nothing begun
        testing.run_inline(handle, {"n": 1}, conn=conn)
        conn.rollback()
        assert conn.execute(f"select count(*) from {pg_schema}.t").fetchone() == (0,)


# -- memory_queue -----------------------------------------------------------------------------------

class _Counting(MemoryDriver):
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_memory_queue_swaps_the_process_driver_and_puts_the_old_one_back_open(registry):
    handle = declare(registry, lambda ctx, i: None, name="noted")
    before = _Counting()
    xjobs.configure(driver=before)
    try:
        with testing.memory_queue() as outer:
            assert xjobs.current_driver() is outer and isinstance(outer.clock, ManualClock)
            handle.enqueue({"n": 1})
            with testing.memory_queue() as inner:
                assert xjobs.current_driver() is inner
                testing.refute_enqueued(handle)
            assert xjobs.current_driver() is outer
            testing.assert_enqueued(handle, {"n": 1}, count=1)
            with pytest.raises(KeyError), testing.memory_queue():
                raise KeyError("a failing test still gets its driver back")
            assert xjobs.current_driver() is outer
        assert xjobs.current_driver() is before and before.closed == 0
        testing.refute_enqueued(handle)
    finally:
        xjobs.configure(driver=None)


# -- run_until_idle, on both drivers --------------------------------------------------------------

def test_run_until_idle_runs_everything_due_in_claim_order_and_counts_outcomes(driver, registry):
    order = []
    ok = declare(registry, lambda ctx, i: order.append(i["n"]), name="ok")
    def follow(ctx, i):
        enqueue_many(ok, [{"n": 100 + i["n"]}], driver=driver)   # enqueued by a body: run too
    chained = declare(registry, follow, name="chained", idempotency_key=lambda i: f"c{i['n']}")
    boom = declare(registry, lambda ctx, i: 1 / 0, name="boom", retry=xjobs.Retry(attempts=1))
    enqueue_many(ok, [{"n": 1}, {"n": 2}], driver=driver)
    enqueue_many(chained, [{"n": 3}], driver=driver)
    enqueue_many(boom, [{"n": 4}], driver=driver)
    summary = testing.run_until_idle(driver=driver, registry=registry)
    assert summary.jobs == {"ok": {"completed": 3}, "chained": {"completed": 1}, "boom": {"dead": 1}}
    assert (summary.completed, summary.dead, summary.retried) == (4, 1, 0)
    assert order == [1, 2, 103]
    [dead] = testing.enqueued(boom, driver=driver, states="dead")
    assert "ZeroDivisionError" in dead.last_error  # type: ignore[operator]
    assert testing.run_until_idle(driver=driver, registry=registry).jobs == {}


def test_run_until_idle_retries_due_now_but_leaves_later_ones(driver, registry, clock):
    def flaky(ctx, i):
        if ctx.attempt < 3:
            raise RetryAfter(i["after"])
    handle = declare(registry, flaky, name="flaky", retry=xjobs.Retry(attempts=5, delay="0s", max_delay="1h"))
    enqueue_many(handle, [{"n": 1, "after": 0}, {"n": 2, "after": 60}], driver=driver)
    summary = testing.run_until_idle(driver=driver, registry=registry)
    assert summary.jobs == {"flaky": {"retried": 3, "completed": 1}}
    [later] = testing.enqueued(handle, driver=driver)
    assert (later.payload["n"], later.state, later.attempt) == (2, "ready", 1)
    assert later.run_at == pytest.approx(clock.now_ms() + 60_000, abs=1)

    summary = testing.run_until_idle(driver=driver, registry=registry, with_scheduled=True)
    assert summary.jobs == {"flaky": {"retried": 1, "completed": 1}}
    assert summary.advanced_ms == pytest.approx(120_000, abs=1)
    testing.refute_enqueued(handle, driver=driver)


def test_with_scheduled_runs_delayed_jobs_to_their_end(driver, registry, clock):
    def never(ctx, i):
        raise ValueError(f"attempt {ctx.attempt}")
    handle = declare(registry, never, name="never",
                     retry=xjobs.Retry(attempts=3, delay="10s", max_delay="1m", jitter=False))
    enqueue_many(handle, [{"n": 1}], delay="5m", driver=driver)
    assert testing.run_until_idle(driver=driver, registry=registry).jobs == {}
    start = clock.now_ms()
    summary = testing.run_until_idle(driver=driver, registry=registry, with_scheduled=True)
    assert summary.jobs == {"never": {"retried": 2, "dead": 1}}
    assert clock.now_ms() - start == pytest.approx(300_000 + 10_000 + 20_000, abs=1)
    [view] = testing.enqueued(handle, driver=driver, states=testing.STATES)
    assert view.state == "dead" and "ValueError: attempt 3" in view.last_error  # type: ignore[operator]


def test_run_until_idle_runs_only_the_queues_it_is_given(driver, registry):
    a = declare(registry, lambda ctx, i: None, name="a", queue="qa")
    b = declare(registry, lambda ctx, i: None, name="b", queue="qb")
    enqueue_many(a, [{"n": 1}], driver=driver)
    enqueue_many(b, [{"n": 1}], driver=driver)
    assert testing.run_until_idle("qa", driver=driver, registry=registry).jobs == {"a": {"completed": 1}}
    testing.assert_enqueued(b, {"n": 1}, count=1, driver=driver)
    assert testing.run_until_idle(["qb"], driver=driver, registry=registry).jobs == {"b": {"completed": 1}}


def test_run_until_idle_gives_up_on_a_queue_that_never_empties(driver, registry):
    def again(ctx, i):
        enqueue_many(forever, [{"n": i["n"] + 1}], driver=driver)
    forever = declare(registry, again, name="forever")
    enqueue_many(forever, [{"n": 0}], driver=driver)
    with pytest.raises(testing.NotIdle) as err:
        testing.run_until_idle(driver=driver, registry=registry, timeout=0.5)
    assert err.value.code == "X_TESTING_NOT_IDLE"
    assert err.value.details["summary"].completed > 0  # type: ignore[attr-defined]


def test_run_until_idle_refusals(registry):
    declare(registry, lambda ctx, i: None, name="x")
    with pytest.raises(InvalidOption, match="with_scheduled"):
        testing.run_until_idle(driver=MemoryDriver(), registry=registry, with_scheduled=True)
    with pytest.raises(InvalidOption, match="no jobs are registered"):
        testing.run_until_idle(driver=MemoryDriver(clock=ManualClock()), registry=xjobs.Registry())
    with pytest.raises(InvalidOption, match="nope"):
        testing.run_until_idle("nope", driver=MemoryDriver(clock=ManualClock()), registry=registry)


def test_run_until_idle_leaves_the_driver_open(registry):
    declare(registry, lambda ctx, i: None, name="x")
    driver = _Counting(clock=ManualClock())
    testing.run_until_idle(driver=driver, registry=registry)
    assert driver.closed == 0


def test_run_until_idle_uses_the_configured_driver_and_the_global_registry_by_default(registry):
    handle = declare(registry, lambda ctx, i: None, name="configured")
    with testing.memory_queue():
        handle.enqueue({"n": 1})
        assert testing.run_until_idle("q", registry=registry).completed == 1
        testing.assert_enqueued(handle, {"n": 1}, states="completed")


# -- enqueued, assert_enqueued, refute_enqueued, on both drivers ----------------------------------

def test_enqueued_answers_live_jobs_oldest_first_with_payloads(driver, registry):
    a = declare(registry, lambda ctx, i: None, name="a")
    b = declare(registry, lambda ctx, i: None, name="b")
    enqueue_many(a, [{"n": 1, "t": (1, 2)}, {"n": 2}], driver=driver)
    enqueue_many(b, [{"n": 3}], driver=driver)
    assert [v.payload for v in testing.enqueued(a, driver=driver)] == [{"n": 1, "t": [1, 2]}, {"n": 2}]
    assert [v.name for v in testing.enqueued(driver=driver)] == ["a", "a", "b"]
    assert [v.payload for v in testing.enqueued("b", driver=driver)] == [{"n": 3}]
    assert testing.enqueued(a, driver=driver, states="completed") == []
    with pytest.raises(InvalidOption, match="states"):
        testing.enqueued(a, driver=driver, states="done")


def test_assert_enqueued_matches_input_as_stored_and_counts(driver, registry):
    handle = declare(registry, lambda ctx, i: None, name="mail", idempotency_key=lambda i: str(i["id"]))
    enqueue_many(handle, [{"id": 1, "to": ["a"]}, {"id": 2, "to": ["b"]}], driver=driver)
    [view] = testing.assert_enqueued(handle, {"to": ("a",), "id": 1}, driver=driver)
    assert view.payload == {"id": 1, "to": ["a"]}
    testing.assert_enqueued(handle, count=2, driver=driver)
    testing.assert_enqueued("mail", {"id": 2, "to": ["b"]}, count=1, driver=driver)
    testing.refute_enqueued(handle, {"id": 3, "to": ["a"]}, driver=driver)
    testing.refute_enqueued(handle, driver=driver, states="dead")


def test_assertion_failures_say_what_was_expected_and_what_is_there(driver, registry):
    handle = declare(registry, lambda ctx, i: None, name="mail")
    other = declare(registry, lambda ctx, i: None, name="other")
    enqueue_many(handle, [{"n": i} for i in range(12)], driver=driver)
    with pytest.raises(AssertionError) as err:
        testing.assert_enqueued(handle, {"n": 99}, driver=driver)
    text = str(err.value)
    assert text.startswith("expected at least one job 'mail' in state ready|running|suspended "
                           "with input {'n': 99}, found 0; 'mail' jobs in those states (12):\n")
    assert "  #1 ready attempt 0: {'n': 0}" in text and "... and 2 more" in text
    with pytest.raises(AssertionError, match="expected exactly 3 job 'mail'.*found 12"):
        testing.assert_enqueued(handle, count=3, driver=driver)
    with pytest.raises(AssertionError, match="'other' jobs in those states: none"):
        testing.assert_enqueued(other, driver=driver)
    with pytest.raises(AssertionError) as err:
        testing.refute_enqueued(handle, {"n": 5}, driver=driver)
    assert "expected no job 'mail'" in str(err.value) and "#6 ready attempt 0: {'n': 5}" in str(err.value)


@pytest.mark.postgres
def test_run_until_idle_on_a_production_driver_uses_the_server_clock(registry, pg_dsn, pg_schema):
    from xjobs.drivers.postgres import PostgresDriver
    driver = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=2, application_name="xjobs-tests")
    driver.migrate()
    try:
        handle = declare(registry, lambda ctx, i: None, name="prod")
        enqueue_many(handle, [{"n": 1}], driver=driver)
        enqueue_many(handle, [{"n": 2}], delay="1h", driver=driver)
        assert testing.run_until_idle(driver=driver, registry=registry).jobs == {"prod": {"completed": 1}}
        [later] = testing.assert_enqueued(handle, count=1, driver=driver)
        assert later.payload == {"n": 2}
        with pytest.raises(InvalidOption, match="with_scheduled"):
            testing.run_until_idle(driver=driver, registry=registry, with_scheduled=True)
    finally:
        driver.close()


def test_run_inline_refuses_an_attempt_no_worker_would_give(registry):
    handle = declare(registry, lambda ctx, i: None)
    for attempt in (0, 1.5, float("nan")):
        with pytest.raises(InvalidOption, match="attempt"):
            testing.run_inline(handle, {"n": 1}, attempt=attempt)  # type: ignore[arg-type]
