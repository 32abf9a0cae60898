"""A worker whose database client is built by ``on_worker_start`` in the worker process and
closed by ``on_worker_stop``, as an app holding a pool or an SDK client does. With
``HOOKS_APP_FAIL`` set the start hook raises, as a client refused at start would."""

from __future__ import annotations

import os

import psycopg

from xjobs import job, on_worker_start, on_worker_stop

_client: dict[str, object] = {}


def _schema() -> str:
    return os.environ.get("XJOBS_SCHEMA", "xjobs")


@on_worker_start
def open_client() -> None:
    if os.environ.get("HOOKS_APP_FAIL"):
        raise ConnectionError("the payments service refused our key")
    _client["conn"] = psycopg.connect(os.environ["XJOBS_DATABASE_URL"], autocommit=True)
    _client["pid"] = os.getpid()


@on_worker_stop
def close_client() -> None:
    conn = _client.pop("conn")
    assert isinstance(conn, psycopg.Connection)
    conn.execute(f"insert into {_schema()}.effects (job_id, attempt, pid, name) values (0, 0, %s, 'stop hook')",
                 (_client["pid"],))
    conn.close()


@job(queue="hooked", idempotency_key=lambda i: f"hooked:{i['n']}", tenant="none")
def uses_client(ctx, input):
    """Writes through the client its worker's start hook built; fails if none was built here."""
    conn = _client["conn"]
    assert isinstance(conn, psycopg.Connection)
    conn.execute(f"insert into {_schema()}.effects (job_id, attempt, pid, name) values (%s, %s, %s, 'body')",
                 (ctx.job_id, ctx.attempt, _client["pid"]))
