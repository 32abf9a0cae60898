"""A small ASGI application, written as an async web handler is (a FastAPI route would be the
same few lines): ``POST /orders/{n}`` enqueues the order's receipt and writes the order in
one transaction of its own ``psycopg.AsyncConnection``; with ``?fail=1`` the handler fails
after both, so that transaction rolls back and answers 500."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableMapping

import psycopg

from tests.apps.daemon_app import touch_alpha

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Declined(Exception):
    pass


def make_app(dsn: str, schema: str) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        n = int(scope["path"].rsplit("/", 1)[1])
        status, body = 201, b""
        try:
            # the connection's context commits on a clean exit and rolls back on an exception
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                job = await touch_alpha.aenqueue({"n": n}, conn=conn)   # the transaction's first statement
                await conn.execute(f"insert into {schema}.orders (n, job_id) values (%s, %s)", (n, job.id))
                if b"fail=1" in scope["query_string"]:
                    raise Declined("payment declined")
            body = str(job.id).encode()
        except Declined as exc:
            status, body = 500, str(exc).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})
    return app
