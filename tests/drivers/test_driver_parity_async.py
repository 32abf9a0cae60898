"""The async verbs on both drivers: ``aenqueue``, ``aenqueue_many``, ``asend_event`` and
``outbox.astage`` answer what their synchronous verbs answer, join the caller's transaction
(Postgres: a psycopg ``AsyncConnection``; memory: its own ``job_transaction``), and refuse
what the synchronous verbs refuse, with the same codes, before anything is written."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, AsyncIterator, Callable

import psycopg
import pytest

import xjobs
from tests.drivers.parity import claim, run, wait
from xjobs import outbox
from xjobs.drivers.base import Lease, ListFilter
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.records import ENQUEUE_CHUNK
from xjobs.enqueue import aenqueue_many, enqueue_many
from xjobs.errors import XJobsError
from xjobs.events import asend_event, send_event


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


@pytest.fixture
def handle() -> xjobs.JobHandle:
    registry = xjobs.Registry()
    return xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
                     registry=registry, name="tx")(lambda ctx, i: None)


@pytest.fixture
def transaction(driver, request) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    """A caller's transaction an async verb joins: a fresh psycopg AsyncConnection (committed
    on a clean exit, rolled back on an exception), or the memory driver's own transaction (of
    a job claimed from another queue, for the purpose)."""
    @contextlib.asynccontextmanager
    async def begin() -> AsyncIterator[Any]:
        if isinstance(driver, MemoryDriver):
            [carrier] = driver.job_enqueue([_carrier(driver)])
            [job] = [j for j in claim(driver, "carrier") if j.id == carrier.id]
            with driver.job_transaction(Lease(job.id, job.token)) as tx:
                yield tx
            return
        dsn = request.getfixturevalue("pg_dsn")
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            yield conn
    return begin


def _carrier(driver) -> Any:
    from tests.drivers.parity import new_job
    return new_job(f"carrier-{len(driver.job_list(ListFilter(queue='carrier', limit=1000)))}", queue="carrier")


def _queued(driver) -> list[int]:
    return sorted(v.id for v in driver.job_list(ListFilter(queue="q", limit=ENQUEUE_CHUNK * 2)))


def test_aenqueue_answers_what_enqueue_answers_in_a_committed_transaction(driver, handle, transaction):
    async def go() -> tuple[list[xjobs.Enqueued], xjobs.Enqueued]:
        async with transaction() as conn:
            made = await aenqueue_many(handle, [{"n": 1}, {"n": 2}, {"n": 1}], conn=conn, driver=driver)
        async with transaction() as conn:
            again = (await aenqueue_many(handle, [{"n": 2}], conn=conn, driver=driver))[0]
        return made, again
    made, again = asyncio.run(go())
    assert [m.deduped for m in made] == [False, False, True] and made[2].id == made[0].id
    assert again == xjobs.Enqueued(made[1].id, True)
    assert enqueue_many(handle, [{"n": 1}], driver=driver) == [xjobs.Enqueued(made[0].id, True)]
    assert _queued(driver) == sorted({m.id for m in made})
    view = driver.job_get(made[0].id)
    assert (view.name, view.queue, view.state, view.idempotency_key) == ("tx", "q", "ready", "1")


@pytest.mark.parametrize("count", [1, ENQUEUE_CHUNK + 1], ids=["one-statement", "chunked"])
def test_a_rolled_back_aenqueue_leaves_nothing(driver, handle, transaction, count):
    async def go() -> None:
        with pytest.raises(Rollback):
            async with transaction() as conn:
                await aenqueue_many(handle, [{"n": n} for n in range(count)], conn=conn, driver=driver)
                raise Rollback()
        assert _queued(driver) == []
        async with transaction() as conn:
            await aenqueue_many(handle, [{"n": n} for n in range(count)], conn=conn, driver=driver)
    asyncio.run(go())
    assert len(_queued(driver)) == count


def test_without_a_connection_the_async_verbs_write_through_the_driver(driver, handle):
    job_id, lease = run(driver, "waiter")
    assert not wait(driver, lease, "w", "paid", "o1").done

    async def go() -> tuple[xjobs.Enqueued, Any, int]:
        made = await aenqueue_many(handle, [{"n": 7}], driver=driver)
        sent = await asend_event("paid", key="o1", payload={"v": 1}, driver=driver)
        staged = await outbox.astage(None, handle, {"n": 8}, driver=driver)
        return made[0], sent, staged
    made, sent, staged = asyncio.run(go())
    assert _queued(driver) == [made.id] and not made.deduped
    assert sent.woken == 1 and driver.job_get(job_id).state == "ready"
    assert staged >= 1 and driver.outbox_summary().pending == 1


def test_a_rolled_back_asend_event_wakes_nobody_and_a_committed_one_does(driver, transaction):
    job_id, lease = run(driver, "waiter")
    assert not wait(driver, lease, "w", "paid", "o1").done

    async def go(fail: bool) -> int:
        async with transaction() as conn:
            sent = await asend_event("paid", key="o1", payload={"v": 2}, conn=conn, driver=driver)
            if fail:
                raise Rollback()
        return sent.woken
    with pytest.raises(Rollback):
        asyncio.run(go(fail=True))
    assert driver.job_get(job_id).state == "suspended"
    assert asyncio.run(go(fail=False)) == 1
    assert driver.job_get(job_id).state == "ready"


def test_astage_in_a_committed_transaction_stages_the_jobs(driver, handle, transaction):
    async def go() -> list[int]:
        async with transaction() as conn:
            one = await outbox.astage(conn, handle, {"n": 1}, driver=driver)
            more = await outbox.astage_many(conn, handle, [{"n": 2}, {"n": 3}], driver=driver)
            assert await outbox.astage_many(conn, handle, [], driver=driver) == []
        return [one, *more]
    ids = asyncio.run(go())
    assert len(set(ids)) == 3 and driver.outbox_summary().pending == 3


# every refusal of the synchronous call, raised by the awaited one with the same code, and
# nothing written by either
REFUSED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "delay and run_at": ({"n": 1}, {"delay": 5, "run_at": 10**12}),
    "priority a bool": ({"n": 1}, {"priority": True}),
    "priority out of range": ({"n": 1}, {"priority": 40_000}),
    "negative delay": ({"n": 1}, {"delay": -1}),
    "delay NaN": ({"n": 1}, {"delay": float("nan")}),
    "naive run_at": ({"n": 1}, {"run_at": __import__("datetime").datetime(2030, 1, 1)}),
    "payload over the limit": ({"n": 1, "pad": "x" * (2 * 1024 * 1024)}, {}),
    "input with no key": ({"m": 1}, {}),
    "enqueued_by with NUL": ({"n": 1}, {"enqueued_by": "a\x00b"}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_awaited_call_refuses_what_the_synchronous_one_refuses(driver, handle, transaction, case):
    item, options = REFUSED[case]
    with pytest.raises(XJobsError) as sync_refusal:
        enqueue_many(handle, [{"n": 0}, item], driver=driver, **options)

    async def go() -> list[XJobsError]:
        refusals: list[XJobsError] = []
        async with transaction() as conn:
            for call in (lambda: aenqueue_many(handle, [{"n": 0}, item], conn=conn, driver=driver, **options),
                         lambda: aenqueue_many(handle, [{"n": 0}, item], driver=driver, **options),
                         lambda: outbox.astage_many(conn, handle, [{"n": 0}, item], driver=driver, **options)):
                try:
                    await call()
                except XJobsError as exc:
                    refusals.append(exc)
        return refusals
    refusals = asyncio.run(go())
    assert [(type(r), r.code) for r in refusals] == [(type(sync_refusal.value), sync_refusal.value.code)] * 3
    assert _queued(driver) == [] and driver.outbox_summary().pending == 0


def test_asend_event_refuses_what_send_event_refuses(driver, transaction):
    for kwargs in ({"payload": None}, {"key": "a\x00b"}):
        with pytest.raises(XJobsError) as sync_refusal:
            send_event("paid", driver=driver, **kwargs)

        async def go() -> XJobsError:
            async with transaction() as conn:
                try:
                    await asend_event("paid", conn=conn, driver=driver, **kwargs)
                except XJobsError as exc:
                    return exc
            raise AssertionError("not refused")
        assert asyncio.run(go()).code == sync_refusal.value.code


def test_a_connection_no_driver_can_join_is_refused_alike(driver, handle):
    async def go() -> list[XJobsError]:
        refusals = []
        for call in (lambda: aenqueue_many(handle, [{"n": 1}], conn=object(), driver=driver),  # type: ignore[arg-type]
                     lambda: asend_event("paid", conn=object(), driver=driver),  # type: ignore[arg-type]
                     lambda: outbox.astage(object(), handle, {"n": 1}, driver=driver)):  # type: ignore[arg-type]
            try:
                await call()
            except XJobsError as exc:
                refusals.append(exc)
        return refusals
    refusals = asyncio.run(go())
    assert [(r.code, getattr(r, "option", None)) for r in refusals] == [("X_INVALID_OPTION", "conn")] * 3
    assert _queued(driver) == [] and driver.outbox_summary().pending == 0


def test_a_large_awaited_call_dedupes_across_its_statements_as_one_call(driver, handle, transaction):
    """1,200 inputs, each key twice: built off the loop, sent in several statements, and
    answered as ``enqueue_many`` answers one call."""
    inputs = [{"n": n % 600} for n in range(1200)]

    async def go() -> list[xjobs.Enqueued]:
        async with transaction() as conn:
            return await aenqueue_many(handle, inputs, conn=conn, driver=driver)
    made = asyncio.run(go())
    assert [m.deduped for m in made] == [False] * 600 + [True] * 600
    assert [m.id for m in made[600:]] == [m.id for m in made[:600]]
    assert _queued(driver) == sorted(m.id for m in made[:600])
    assert enqueue_many(handle, inputs[:3], driver=driver) == [xjobs.Enqueued(m.id, True) for m in made[:3]]


def test_a_large_awaited_call_with_one_bad_input_writes_nothing(driver, handle, transaction):
    async def go() -> XJobsError:
        async with transaction() as conn:
            try:
                await aenqueue_many(handle, [{"n": n} for n in range(300)] + [{"m": 1}], conn=conn, driver=driver)
            except XJobsError as exc:
                return exc
        raise AssertionError("not refused")
    refused = asyncio.run(go())
    with pytest.raises(XJobsError) as sync_refusal:
        enqueue_many(handle, [{"m": 1}], driver=driver)
    assert refused.code == sync_refusal.value.code and _queued(driver) == []
