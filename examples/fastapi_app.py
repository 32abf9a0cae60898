"""A FastAPI shop whose order and shipping job are written in one async transaction.

    pip install -e '.[embedded,fastapi]'
    xjobsd run --app examples.fastapi_app & xjobsd status --wait && uvicorn examples.fastapi_app:app

    curl -s -XPOST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"item": "gadget", "quantity": 2}'          # 201 {"order": 1, "job": 1}
    curl -s localhost:8000/orders/1                      # state "ready", then "completed" and its result
    curl -s -XPOST localhost:8000/orders -H 'content-type: application/json' \\
         -d '{"item": "gadget", "quantity": 2}'          # 409: one gadget left; no order, no job

``POST /orders`` writes the order, enqueues ``ship_order`` with ``aenqueue(conn=)`` on the
same pooled ``AsyncConnection`` and then reserves the stock. The pool's ``connection()``
block is one transaction: it commits when the handler returns and rolls back when it raises,
so an order refused for want of stock leaves neither its row nor its job, and a committed
one is shipped exactly as it was written. ``GET /orders/{id}`` reads the job's state, and
what its body returned once it completed, with ``xjobs.aget`` on the handler's connection.

The queue lives in the application's own database (that is what lets the job join its
transactions): ``XJOBS_DATABASE_URL``, ``xjobs.toml``, or the database of the ``xjobsd``
running in this directory, an embedded one when nothing is configured.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, HTTPException, Request
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

import xjobs
from xjobs.config import current_settings
from xjobs.context import Ctx

STOCK = {"widget": 10, "gadget": 3}

TABLES = """
create table if not exists stock (item text primary key, in_stock int not null);
create table if not exists orders (id bigserial primary key, item text not null,
                                   quantity int not null, job_id bigint);
"""


@xjobs.job(queue="orders", idempotency_key=lambda i: f"order:{i['order']}", tenant="none")
async def ship_order(ctx: Ctx, input: dict[str, Any]) -> dict[str, Any]:
    """Run by ``xjobsd``'s worker once the order's transaction committed; what it returns is
    the job's result, which ``GET /orders/{id}`` shows."""
    ctx.log.info("shipping %s x %s for order %s", input["quantity"], input["item"], input["order"])
    return {"order": input["order"], "parcel": f"P{input['order']:06d}"}


class NewOrder(BaseModel):
    item: str
    quantity: int = Field(gt=0)


def create_app(*, dsn: str | None = None, schema: str = "public") -> FastAPI:
    """The application. ``dsn`` defaults to the database the queue lives in; ``schema`` is
    where the shop's own tables are (the jobs' tables are xjobs's, in its schema)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = AsyncConnectionPool(dsn or _queues_database(), min_size=1, max_size=4, open=False,
                                   kwargs={"options": f"-c search_path={schema}"})
        await pool.open()
        async with pool.connection() as conn:
            await conn.execute(TABLES)
            for item, count in STOCK.items():
                await conn.execute("insert into stock values (%s, %s) on conflict do nothing", (item, count))
        app.state.pool = pool
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(title="xjobs shop", lifespan=lifespan)

    @app.post("/orders", status_code=201)
    async def create_order(order: NewOrder, request: Request) -> dict[str, int]:
        pool: AsyncConnectionPool = request.app.state.pool
        async with pool.connection() as conn:     # one transaction: commit on return, rollback on raise
            cur = await conn.execute("insert into orders (item, quantity) values (%s, %s) returning id",
                                     (order.item, order.quantity))
            order_id = _first(await cur.fetchone())
            job = await ship_order.aenqueue({"order": order_id, "item": order.item,
                                             "quantity": order.quantity}, conn=conn)
            await conn.execute("update orders set job_id = %s where id = %s", (job.id, order_id))
            # the reservation comes last, so that its refusal shows what the rollback takes
            # back: the order and its job, both written above in this transaction
            cur = await conn.execute("update stock set in_stock = in_stock - %s where item = %s "
                                     "returning in_stock", (order.quantity, order.item))
            left = await cur.fetchone()
            if left is None or left[0] < 0:
                raise HTTPException(409, f"not enough {order.item} in stock")
        return {"order": order_id, "job": job.id}

    @app.get("/orders/{order_id}")
    async def show_order(order_id: int, request: Request) -> dict[str, Any]:
        pool: AsyncConnectionPool = request.app.state.pool
        async with pool.connection() as conn:
            cur = await conn.execute("select item, quantity, job_id from orders where id = %s", (order_id,))
            row = await cur.fetchone()
            if row is None:
                raise HTTPException(404, f"no order {order_id}")
            shipping = await xjobs.aget(row[2], conn=conn)
        return {"order": order_id, "item": row[0], "quantity": row[1], "job": row[2],
                "state": shipping["state"], "result": shipping["result"]}

    return app


def _queues_database() -> str:
    """The DSN of the database the queue lives in, where ``xjobs`` itself finds it."""
    xjobs.current_driver()      # resolves it, or says each place it looked
    dsn = current_settings().dsn
    if not dsn:
        raise RuntimeError("xjobs found no database URL")
    return dsn


def _first(row: tuple[Any, ...] | None) -> int:
    if row is None:
        raise RuntimeError("insert ... returning answered no row")
    return int(row[0])


app = create_app()
