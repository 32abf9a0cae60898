"""An async web handler enqueues inside its ``AsyncConnection`` transaction, through a real
ASGI application (httpx's ASGI transport): what it committed runs under ``xjobsd``, what it
rolled back never exists; both read back in SQL."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.apps.asgi_app import make_app
from tests.daemon_fixtures import wait_for
from xjobs.config import swap_driver

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

REQUESTS = 12   # at once, each on a connection of its own: within the suite's session budget


def test_a_handlers_committed_enqueue_runs_under_xjobsd_and_a_rolled_back_one_leaves_nothing(daemon_env):
    env = daemon_env
    env.sql("create table {schema}.orders (n int primary key, job_id bigint not null)")
    daemon = env.start("--queue", "alpha=1x4")
    daemon.ready()
    app = make_app(env.dsn, env.schema)

    async def post_orders() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            # at once, each request on its own connection: odd orders are declined
            return await asyncio.gather(*(client.post(f"/orders/{n}" + ("?fail=1" if n % 2 else ""))
                                          for n in range(REQUESTS)))
    previous = swap_driver(env.driver)    # the application's configured database: the daemon's
    try:
        responses = asyncio.run(post_orders())
    finally:
        swap_driver(previous)
    assert [r.status_code for r in responses] == [500 if n % 2 else 201 for n in range(REQUESTS)]
    committed = {n: int(r.text) for n, r in enumerate(responses) if r.status_code == 201}

    wait_for(lambda: env.one("select count(*) from {schema}.jobs where state = 'completed'") == len(committed),
             60, "the committed orders' jobs to complete")
    assert env.sql("select n, job_id from {schema}.orders order by n") == sorted(committed.items())
    assert env.sql("select id, (payload->>'n')::int, state from {schema}.jobs order by id") == sorted(
        (job_id, n, "completed") for n, job_id in committed.items())
    ran = env.sql("select job_id, count(*) from {schema}.effects group by job_id order by job_id")
    assert ran == sorted((job_id, 1) for job_id in committed.values())
