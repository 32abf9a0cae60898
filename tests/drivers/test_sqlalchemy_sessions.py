"""``conn=`` takes a SQLAlchemy ``Session`` or ``Connection`` (an ``AsyncSession`` or
``AsyncConnection`` for the async verbs) on a real ``postgresql+psycopg`` engine: the job
joins the session's transaction, so the session's commit writes the application's rows and
the job together, and its rollback neither, even when the enqueue is its first statement."""

from __future__ import annotations

import asyncio
from typing import Iterator

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import xjobs
from xjobs import outbox
from xjobs.config import swap_driver
from xjobs.errors import InvalidOption, JobNotFound

pytestmark = pytest.mark.postgres


def _url(dsn: str) -> str:
    return "postgresql+psycopg://" + dsn.split("://", 1)[1]


@pytest.fixture
def app(pg_dsn, pg_driver) -> Iterator[xjobs.JobHandle]:
    """A job of the application's, enqueued through the process-wide driver (this test's),
    and an ``orders`` table the application writes beside it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create table {pg_driver.schema}.orders (n int primary key)")
    registry = xjobs.Registry()
    handle = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
                       registry=registry, name="receipt")(lambda ctx, i: None)
    previous = swap_driver(pg_driver)
    try:
        yield handle
    finally:
        swap_driver(previous)


def _rows(dsn: str, schema: str) -> tuple[list[int], list[int]]:
    """The committed orders, and the inputs of the committed jobs."""
    with psycopg.connect(dsn) as conn:
        orders = [r[0] for r in conn.execute(f"select n from {schema}.orders order by n")]
        jobs = [r[0] for r in conn.execute(f"select (payload->>'n')::int from {schema}.jobs order by 1")]
    return orders, jobs


def test_a_sessions_commit_writes_the_order_and_its_job_and_a_rollback_neither(pg_dsn, pg_driver, app):
    engine = create_engine(_url(pg_dsn))
    schema = pg_driver.schema
    try:
        with Session(engine) as session:
            app.enqueue({"n": 1}, conn=session)          # the session's first statement
            session.rollback()
        with Session(engine) as session:
            session.execute(text(f"insert into {schema}.orders values (2)"))
            app.enqueue({"n": 2}, conn=session)
            assert _rows(pg_dsn, schema) == ([], []), "visible before the session committed"
            session.commit()
        with Session(engine) as session:
            session.execute(text(f"insert into {schema}.orders values (3)"))
            app.enqueue_many([{"n": 3}, {"n": 4}], conn=session)
            session.rollback()
    finally:
        engine.dispose()
    assert _rows(pg_dsn, schema) == ([2], [2])


def test_an_engine_connection_joins_without_a_begin_of_its_own(pg_dsn, pg_driver, app):
    engine = create_engine(_url(pg_dsn))
    try:
        with engine.connect() as conn:
            app.enqueue({"n": 1}, conn=conn)
            conn.commit()
            app.enqueue({"n": 2}, conn=conn)
            xjobs.send_event("paid", key="o1", conn=conn)
            outbox.stage(conn, app, {"n": 3})
            conn.rollback()
        with engine.begin() as conn:
            outbox.stage(conn, app, {"n": 4})
    finally:
        engine.dispose()
    assert _rows(pg_dsn, pg_driver.schema) == ([], [1])
    assert pg_driver.outbox_summary().pending == 1


def test_an_async_sessions_commit_writes_the_job_and_a_rollback_nothing(pg_dsn, pg_driver, app):
    schema = pg_driver.schema

    async def go() -> None:
        engine = create_async_engine(_url(pg_dsn))
        try:
            async with AsyncSession(engine) as session:
                await app.aenqueue({"n": 1}, conn=session)     # its first statement
                await session.rollback()
            async with AsyncSession(engine) as session:
                await session.execute(text(f"insert into {schema}.orders values (2)"))
                await app.aenqueue_many([{"n": 2}, {"n": 3}], conn=session)
                await xjobs.asend_event("paid", key="o1", conn=session)
                await outbox.astage(session, app, {"n": 9})
                assert _rows(pg_dsn, schema) == ([], [])
                await session.commit()
            async with engine.connect() as conn:             # an AsyncConnection, no begin
                await app.aenqueue({"n": 4}, conn=conn)
                await conn.rollback()
        finally:
            await engine.dispose()
    asyncio.run(go())
    assert _rows(pg_dsn, schema) == ([2], [2, 3])
    assert pg_driver.outbox_summary().pending == 1


def test_a_session_of_the_wrong_kind_or_an_engine_is_refused(pg_dsn, pg_driver, app):
    engine = create_engine(_url(pg_dsn))

    async def async_refusals() -> list[str]:
        async_engine = create_async_engine(_url(pg_dsn))
        reasons = []
        try:
            async with AsyncSession(async_engine) as session:
                try:
                    app.enqueue({"n": 1}, conn=session)
                except InvalidOption as exc:
                    reasons.append(exc.reason)
            with Session(engine) as sync_session:
                try:
                    await app.aenqueue({"n": 1}, conn=sync_session)
                except InvalidOption as exc:
                    reasons.append(exc.reason)
            try:
                await app.aenqueue({"n": 1}, conn=async_engine)
            except InvalidOption as exc:
                reasons.append(exc.reason)
        finally:
            await async_engine.dispose()
        return reasons
    try:
        with pytest.raises(InvalidOption, match="no transaction") as refused:
            app.enqueue({"n": 1}, conn=engine)
        assert refused.value.option == "conn"
        reasons = asyncio.run(async_refusals())
    finally:
        engine.dispose()
    assert len(reasons) == 3
    assert "aenqueue(..., conn=)" in reasons[0] and "enqueue(..., conn=)" in reasons[1]
    assert "no transaction" in reasons[2]
    assert _rows(pg_dsn, pg_driver.schema) == ([], [])


def test_a_session_on_another_driver_than_psycopg_is_refused():
    """An engine on psycopg2 or asyncpg hands out connections xjobs cannot join: what
    ``driver_connection`` answers there is not a psycopg one."""
    class Fairy:
        driver_connection = object()

    class Connection:   # stands in for sqlalchemy.engine.Connection on another driver
        connection = Fairy()

        def in_transaction(self) -> bool:
            return True
    Connection.__module__ = "sqlalchemy.engine.base"
    from xjobs.connections import joined
    with pytest.raises(InvalidOption, match="psycopg 3 connections only"):
        joined(Connection(), "enqueue")  # type: ignore[arg-type]


def test_get_and_aget_read_in_the_sessions_transaction(pg_dsn, pg_driver, app):
    """A job enqueued on a session and not committed yet is found by a read on that session
    (``xjobs.get``, ``Enqueued.get``, and their awaited forms on an ``AsyncSession`` or
    ``AsyncConnection``), and by no other connection."""
    engine = create_engine(_url(pg_dsn))
    try:
        with Session(engine) as session:
            made = app.enqueue({"n": 1}, conn=session)
            assert xjobs.get(made.id, conn=session)["state"] == "ready"
            assert made.get(conn=session)["id"] == made.id
            with pytest.raises(JobNotFound):
                xjobs.get(made.id)                  # the driver's pool: not committed yet
            session.rollback()
        with engine.connect() as conn:              # an engine Connection, no begin of its own
            made = app.enqueue({"n": 2}, conn=conn)
            assert xjobs.get(made.id, conn=conn)["state"] == "ready"
            conn.commit()
    finally:
        engine.dispose()

    async def go() -> list[str]:
        async_engine = create_async_engine(_url(pg_dsn))
        try:
            async with AsyncSession(async_engine) as session:
                pending = await app.aenqueue({"n": 3}, conn=session)
                states = [(await xjobs.aget(pending.id, conn=session))["state"],
                          (await pending.aget(conn=session))["state"]]
                try:
                    await xjobs.aget(pending.id)
                except JobNotFound:
                    states.append("unseen outside")
                await session.rollback()
            async with async_engine.connect() as aconn:
                states.append((await xjobs.aget(made.id, conn=aconn))["state"])
            return states
        finally:
            await async_engine.dispose()
    assert asyncio.run(go()) == ["ready", "ready", "unseen outside", "ready"]
    assert _rows(pg_dsn, pg_driver.schema) == ([], [2])


def test_a_read_on_a_session_of_the_wrong_kind_names_the_other_form(pg_dsn, pg_driver, app):
    engine = create_engine(_url(pg_dsn))

    async def aget_on_a_session() -> None:
        with Session(engine) as session:
            await xjobs.aget(1, conn=session)  # type: ignore[arg-type]

    try:
        with pytest.raises(InvalidOption, match="no transaction"):
            xjobs.get(1, conn=engine)  # type: ignore[arg-type]
        with pytest.raises(InvalidOption, match=r"get\(\.\.\., conn=\)"):
            asyncio.run(aget_on_a_session())
    finally:
        engine.dispose()


def test_every_write_on_a_session_is_in_its_transaction(pg_dsn, pg_driver, app):
    """Each verb that takes ``conn=`` (``enqueue``, ``enqueue_many``, ``send_event``,
    ``outbox.stage``, ``outbox.stage_many``) writes nothing a rollback of the ``Session``
    leaves, and what its commit keeps."""
    schema = pg_driver.schema
    engine = create_engine(_url(pg_dsn))
    writes = [lambda s: app.enqueue({"n": 1}, conn=s),
              lambda s: app.enqueue_many([{"n": 2}, {"n": 3}], conn=s),
              lambda s: xjobs.send_event("paid", key="o1", conn=s),
              lambda s: outbox.stage(s, app, {"n": 4}),
              lambda s: outbox.stage_many(s, app, [{"n": 5}, {"n": 6}])]

    def counts() -> tuple[int, ...]:
        with psycopg.connect(pg_dsn) as conn:
            return tuple(conn.execute(f"select count(*) from {schema}.{table}").fetchone()[0]  # type: ignore[index]
                         for table in ("jobs", "events", "outbox"))
    try:
        for write in writes:
            with Session(engine) as session:
                write(session)                      # the session's first statement
                session.rollback()
        assert counts() == (0, 0, 0)
        with Session(engine) as session:
            for write in writes:
                write(session)
            assert counts() == (0, 0, 0), "visible before the session committed"
            session.commit()
    finally:
        engine.dispose()
    assert counts() == (3, 1, 3)
