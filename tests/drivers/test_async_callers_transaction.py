"""The async verbs write ALL of their rows in the caller's ``AsyncConnection`` transaction,
even as its first statement: on a FRESH connection (not autocommit, nothing run yet), where a
``conn.transaction()`` block would begin and commit a transaction of its own, nothing is seen
by anyone before the commit, and a rollback leaves nothing."""

from __future__ import annotations

import asyncio

import orjson
import psycopg
import pytest

import xjobs
from tests.drivers.parity import run
from xjobs import outbox
from xjobs.drivers.base import NewEvent, StepWait
from xjobs.drivers.records import ENQUEUE_CHUNK
from xjobs.enqueue import aenqueue_many, enqueue_many
from xjobs.errors import DriverError, InvalidOption
from xjobs.events import asend_event

pytestmark = pytest.mark.postgres


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as other:
        return other.execute(sql).fetchone()[0]  # type: ignore[index]


async def _fresh(dsn: str) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(dsn)
    assert not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return conn


@pytest.fixture
def handle() -> xjobs.JobHandle:
    registry = xjobs.Registry()
    return xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
                     registry=registry, name="tx")(lambda ctx, i: None)


@pytest.mark.parametrize("count", [1, ENQUEUE_CHUNK + 1], ids=["one-statement", "chunked"])
def test_a_fresh_async_connections_rollback_leaves_no_job(pg_dsn, pg_driver, handle, count):
    jobs = f"select count(*) from {pg_driver.schema}.jobs"

    async def go(commit: bool) -> None:
        async with await _fresh(pg_dsn) as conn:
            await aenqueue_many(handle, [{"n": n} for n in range(count)], conn=conn, driver=pg_driver)
            assert _count(pg_dsn, jobs) == 0, "visible before the caller committed"
            await (conn.commit() if commit else conn.rollback())
    asyncio.run(go(commit=False))
    assert _count(pg_dsn, jobs) == 0
    asyncio.run(go(commit=True))
    assert _count(pg_dsn, jobs) == count


def test_a_fresh_async_connections_rollback_leaves_no_staged_row_and_no_event(pg_dsn, pg_driver, handle):
    _, lease = run(pg_driver, "waiter")   # created before the send: a later wait would see it
    staged = f"select count(*) from {pg_driver.schema}.outbox"
    events = f"select count(*) from {pg_driver.schema}.events"

    async def go() -> None:
        async with await _fresh(pg_dsn) as conn:
            await outbox.astage(conn, handle, {"n": 1}, driver=pg_driver)
            await asend_event("order.paid", key="o-1", conn=conn, driver=pg_driver)
            assert (_count(pg_dsn, staged), _count(pg_dsn, events)) == (0, 0), "visible before the commit"
            await conn.rollback()
        async with await _fresh(pg_dsn) as conn:
            await asend_event("order.paid", key="o-1", payload={"v": 1}, conn=conn, driver=pg_driver)
            await conn.rollback()
    asyncio.run(go())
    assert (_count(pg_dsn, staged), _count(pg_dsn, events)) == (0, 0)
    outcome = pg_driver.step_wait(lease, StepWait("w", "order.paid", "o-1", 0, None, 1))
    assert outcome.done and outcome.timed_out and outcome.value is None


def test_a_failed_send_inside_a_begun_async_transaction_undoes_only_its_own_rows(pg_dsn, pg_driver):
    async def go() -> int:
        async with await _fresh(pg_dsn) as conn:
            await conn.execute("create temporary table mine (n int)")
            await conn.execute("insert into mine values (1)")
            with pytest.raises(DriverError) as err:
                await pg_driver.event_send_async(NewEvent("e", "k", orjson.dumps({"v": 1})[:-1]), conn)
            assert isinstance(err.value.__cause__, psycopg.Error)
            row = await (await conn.execute("select count(*) from mine")).fetchone()
            await conn.rollback()
            return row[0]  # type: ignore[index]
    assert asyncio.run(go()) == 1


def test_an_async_verb_on_an_autocommit_connection_is_one_transaction_of_its_own(pg_dsn, pg_driver, handle):
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            await aenqueue_many(handle, [{"n": n} for n in range(3)], conn=conn, driver=pg_driver)
    asyncio.run(go())
    assert _count(pg_dsn, f"select count(*) from {pg_driver.schema}.jobs") == 3


def test_a_connection_of_the_other_kind_is_refused_before_anything_is_written(pg_dsn, pg_driver, handle):
    async def sync_conn_to_aenqueue() -> None:
        with psycopg.connect(pg_dsn) as conn:
            await aenqueue_many(handle, [{"n": 1}], conn=conn, driver=pg_driver)  # type: ignore[arg-type]

    async def async_conn_to_enqueue() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            enqueue_many(handle, [{"n": 1}], conn=conn, driver=pg_driver)  # type: ignore[arg-type]
    for wrong, hint in ((sync_conn_to_aenqueue, "enqueue(..., conn=)"),
                        (async_conn_to_enqueue, "aenqueue(..., conn=)")):
        with pytest.raises(InvalidOption, match=hint.replace("(", r"\(").replace(")", r"\)")) as refused:
            asyncio.run(wrong())
        assert refused.value.option == "conn"
    assert _count(pg_dsn, f"select count(*) from {pg_driver.schema}.jobs") == 0


def test_a_connection_that_hands_rows_back_as_dicts_serves_as_well(pg_dsn, pg_driver, handle):
    async def go() -> tuple[list[xjobs.Enqueued], int]:
        async with await psycopg.AsyncConnection.connect(pg_dsn, row_factory=psycopg.rows.dict_row) as conn:
            made = await aenqueue_many(handle, [{"n": 1}, {"n": 1}], conn=conn, driver=pg_driver)
            staged = await outbox.astage(conn, handle, {"n": 2}, driver=pg_driver)
            sent = await asend_event("e", key="k", conn=conn, driver=pg_driver)
            assert sent.woken == 0
            return made, staged
    made, staged = asyncio.run(go())
    assert [m.deduped for m in made] == [False, True] and made[0].id == made[1].id and staged == 1
