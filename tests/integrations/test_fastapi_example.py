"""``examples/fastapi_app.py`` as a user runs it: the FastAPI application under uvicorn (in this
process, on a real socket), its jobs under an ``xjobsd`` subprocess. Orders placed at once,
some refused for want of stock: what a handler committed is shipped by the daemon and its
result read back through the application; what it rolled back left no order and no job, both
asserted in SQL."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
import uvicorn

import xjobs
from examples.fastapi_app import STOCK, create_app
from xjobs.config import swap_driver

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

GADGETS = STOCK["gadget"] + 2    # orders of one gadget each, at once: two more than the stock


async def serve_and_order(app: Any) -> tuple[list[httpx.Response], httpx.Response, list[dict[str, Any]]]:
    """The orders' responses, the over-stock widget order's, and every committed order as
    ``GET /orders/{id}`` shows it once its job settled."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    # the socket listens before the server starts: the client's requests wait in its backlog
    # until the lifespan (the pool, the tables) is up, so nothing polls for readiness
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            gadgets = await asyncio.gather(*(client.post("/orders", json={"item": "gadget", "quantity": 1})
                                             for _ in range(GADGETS)))
            widgets = await client.post("/orders", json={"item": "widget", "quantity": STOCK["widget"] + 1})
            shown = []
            for placed in (r.json() for r in gadgets if r.status_code == 201):
                await xjobs.aresult(placed["job"], timeout=30)       # LISTENs for its settlement
                shown.append((await client.get(f"/orders/{placed['order']}")).json())
        return gadgets, widgets, shown
    finally:
        server.should_exit = True
        await serving
        listening.close()


def test_a_committed_order_is_shipped_under_xjobsd_and_a_refused_one_leaves_no_row_and_no_job(daemon_env):
    env = daemon_env
    daemon = env.start("--app", "examples.fastapi_app", "--queue", "orders=1x4")
    daemon.ready()
    previous = swap_driver(env.driver)     # the application's configured database: the daemon's
    try:
        gadgets, widgets, shown = asyncio.run(serve_and_order(create_app(dsn=env.dsn, schema=env.schema)))
    finally:
        swap_driver(previous)

    assert sorted(r.status_code for r in gadgets) == [201] * STOCK["gadget"] + [409] * 2
    assert widgets.status_code == 409 and "not enough widget" in widgets.text
    placed = sorted((r.json()["order"], r.json()["job"]) for r in gadgets if r.status_code == 201)
    # the committed orders and their jobs, and nothing of the three refused: not a row, not a job
    assert env.sql("select id, job_id from {schema}.orders order by id") == placed
    assert env.sql("select id, name, (payload->>'order')::bigint, state from {schema}.jobs order by id") == [
        (job, "ship_order", order, "completed") for order, job in sorted(placed, key=lambda p: p[1])]
    assert env.sql("select item, in_stock from {schema}.stock order by item") == [
        ("gadget", 0), ("widget", STOCK["widget"])]
    assert sorted((s["order"], s["state"], s["result"]["parcel"]) for s in shown) == [
        (order, "completed", f"P{order:06d}") for order, _ in placed]
