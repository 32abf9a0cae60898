"""Backfills for the daemon tests: ``sweep`` over the ``sweep_rows`` app table (100,000 rows in
the acceptance test), ``sweep_prod`` allowed only in production, ``sweep_stalled`` whose count
never converges. Every read of a page (one per batch body that ran, each after exactly one
pacer wait) is a row of ``sweep_reads``; ``handle`` adds one to each row's ``handled``, so
"handled at least once" is a question for SQL. ``XJOBS_DATABASE_URL`` and ``XJOBS_SCHEMA`` say
where, as for the daemon itself."""

from __future__ import annotations

import os
import threading

from psycopg_pool import ConnectionPool

import xjobs

_lock = threading.Lock()
_pools: dict[int, ConnectionPool] = {}


def app_ddl(schema: str, rows: int) -> str:
    return (f"create table {schema}.sweep_rows (id bigint primary key, handled int not null default 0); "
            f"insert into {schema}.sweep_rows (id) select generate_series(1, {rows}); "
            f"create table {schema}.sweep_reads (name text not null, cursor bigint, attempt int, pid int not null); "
            f"create table {schema}.tiny_rows (id bigint primary key); "
            f"insert into {schema}.tiny_rows select generate_series(1, 25)")


def _db() -> ConnectionPool:
    """This process's pool: a forked child never uses its parent's."""
    with _lock:
        pool = _pools.get(os.getpid())
        if pool is None:
            pool = _pools[os.getpid()] = ConnectionPool(
                os.environ["XJOBS_DATABASE_URL"], min_size=1, max_size=4, kwargs={"autocommit": True},
                open=True, name=f"backfill-app-{os.getpid()}")
        return pool


def _schema() -> str:
    return os.environ.get("XJOBS_SCHEMA", "xjobs")


def _pages(name: str, table: str):
    def source(cursor, limit):
        run = xjobs.current()
        with _db().connection() as db:
            db.execute(f"insert into {_schema()}.sweep_reads values (%s, %s, %s, %s)",
                       (name, cursor, run.attempt if run else None, os.getpid()))
            ids = [r[0] for r in db.execute(f"select id from {_schema()}.{table} where id > %s order by id limit %s",
                                            (cursor or 0, limit)).fetchall()]
        return ids, (ids[-1] if len(ids) == limit else None)
    return source


def mark_handled(rows):
    with _db().connection() as db:
        db.execute(f"update {_schema()}.sweep_rows set handled = handled + 1 where id = any(%s)", (list(rows),))


def unhandled(ctx):
    with _db().connection() as db:
        return db.execute(f"select count(*) from {_schema()}.sweep_rows where handled = 0").fetchone()[0]  # type: ignore[index]


def touch(rows):
    pass


RETRY = xjobs.Retry(attempts=20, delay=0, jitter=False)

sweep = xjobs.backfill(name="sweep", source=_pages("sweep", "sweep_rows"), handle=mark_handled,
                       batch=1000, rate=1000, tenant="none", count=unhandled, queue="sweep", retry=RETRY)
sweep_prod = xjobs.backfill(name="sweep_prod", source=_pages("sweep_prod", "tiny_rows"), handle=touch,
                            batch=10, rate=1000, tenant="none", environments=["production"], queue="sweep")
sweep_stalled = xjobs.backfill(name="sweep_stalled", source=_pages("sweep_stalled", "tiny_rows"), handle=touch,
                               batch=10, rate=1000, tenant="none", count=lambda ctx: 1, queue="sweep")
