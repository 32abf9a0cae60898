"""``xjobs.get(conn=)`` and ``xjobs.aget(conn=)`` read on the application's own connection, in
its transaction, with the statements the driver's pool runs; the memory driver reads without
one."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import xjobs
from tests.drivers.parity import new_job
from xjobs.drivers.base import Claim, Lease, StepResult
from xjobs.errors import InvalidOption, JobNotFound
from xjobs.registry import Registry


@pytest.mark.postgres
def test_get_on_the_callers_connection_finds_the_job_its_transaction_enqueued(pg_driver, pg_dsn):
    with psycopg.connect(pg_dsn) as conn:   # a transaction, as psycopg begins one
        [made] = pg_driver.job_enqueue([new_job("k")], conn=conn)
        assert xjobs.get(made.id, conn=conn, driver=pg_driver)["state"] == "ready"
        with pytest.raises(JobNotFound):
            xjobs.get(made.id, driver=pg_driver)   # the pool's connection: not committed yet
        conn.commit()
    assert xjobs.get(made.id, driver=pg_driver)["id"] == made.id


@pytest.mark.postgres
def test_aget_on_an_async_connection_reads_in_its_transaction(pg_driver, pg_dsn):
    [made] = pg_driver.job_enqueue([new_job("k")])
    [job] = pg_driver.job_claim(Claim(["default"], 1, 30_000, "w1"))
    assert pg_driver.step_put(Lease(job.id, job.token), StepResult("fetch", b'{"rows": 3}', 1, 2.0))
    schema = pg_driver.schema

    async def reads() -> tuple[dict, dict]:
        # rows as dicts: the read takes its columns by position whatever the connection hands back
        async with await psycopg.AsyncConnection.connect(pg_dsn, row_factory=psycopg.rows.dict_row) as conn:
            seen = await xjobs.aget(made.id, conn=conn, driver=pg_driver)
            await conn.execute(f"delete from {schema}.jobs where id = %s", (made.id,))
            try:
                await xjobs.aget(made.id, conn=conn, driver=pg_driver)
            except JobNotFound:
                pass
            else:
                raise AssertionError("the delete of this transaction went unseen")
            outside = await xjobs.aget(made.id, driver=pg_driver)   # the pool: the row is still there
            await conn.rollback()
            return seen, outside
    seen, outside = asyncio.run(reads())
    assert seen == outside == xjobs.get(made.id, driver=pg_driver)
    assert seen["state"] == "running" and [s["name"] for s in seen["steps"]] == ["fetch"]


@pytest.mark.postgres
def test_a_connection_of_the_wrong_kind_is_refused_before_any_read(pg_driver, pg_dsn):
    [made] = pg_driver.job_enqueue([new_job("k")])

    async def aget_on_a_sync_connection() -> None:
        with psycopg.connect(pg_dsn) as conn:
            await xjobs.aget(made.id, conn=conn, driver=pg_driver)  # type: ignore[arg-type]

    async def get_on_an_async_connection() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            xjobs.get(made.id, conn=conn, driver=pg_driver)  # type: ignore[arg-type]
    for wrong in (aget_on_a_sync_connection, get_on_an_async_connection):
        with pytest.raises(InvalidOption) as refused:
            asyncio.run(wrong())
        assert refused.value.option == "conn"


def test_the_memory_driver_answers_the_same_projection_and_takes_no_connection(memory_driver):
    [made] = memory_driver.job_enqueue([new_job("k")])
    got = xjobs.get(made.id, driver=memory_driver)
    assert got["state"] == "ready" and got["waiting_for"] is None and got["steps"] == []
    assert asyncio.run(xjobs.aget(made.id, driver=memory_driver)) == got
    with pytest.raises(InvalidOption, match="PostgreSQL connection"):
        xjobs.get(made.id, conn=object(), driver=memory_driver)  # type: ignore[arg-type]
    with pytest.raises(JobNotFound):
        xjobs.get(made.id + 1, driver=memory_driver)
    assert xjobs.queues(driver=memory_driver, registry=Registry())[0]["ready"] == 1
