"""Exports for the daemon tests: ``<schema>.export_orders`` (created by the test) out to
``$EXPORT_DIR/<input run>/part-NNNNN.csv`` through the fsspec store.

Each write is recorded in ``<schema>.export_puts`` with how many of the run's page checkpoints
(``job_steps`` rows) had landed when it began: the streaming proof, read with SQL. An input
with ``"stall_at": N`` holds the first attempt inside page N's step, before its part is
written, until the run is stopped: the test kills the worker there, mid-export."""

from __future__ import annotations

import os

import xjobs
from xjobs.factories.part_store import FsspecStore, PartStore

from .daemon_app import _db

COLUMNS = ["id", "org", "name", "amount"]
PAGE = 1000


def export_ddl(schema: str) -> str:
    return (f"create table {schema}.export_orders (id bigint primary key, org text not null, "
            f"name text not null, amount numeric not null); "
            f"create table {schema}.export_puts (job_id bigint not null, attempt int not null, "
            f"key text not null, landed int not null, at timestamptz not null default clock_timestamp())")


def _schema() -> str:
    return os.environ.get("XJOBS_SCHEMA", "xjobs")


def orders(input, cursor, limit):
    """Keyset paging by id, one org's rows; the cursor is the last id read."""
    with _db().connection() as db:
        rows = db.execute(f"select id, org, name, amount from {_schema()}.export_orders "
                          "where org = %s and id > %s order by id limit %s",
                          (input["org"], -1 if cursor is None else cursor, limit)).fetchall()
    return rows, (rows[-1][0] if len(rows) == limit else None)


class Recorded:
    """The real store, with each write recorded (and, on request, held) first."""

    def __init__(self, store: PartStore, stall_at: int | None) -> None:
        self.store = store
        self.stall = None if stall_at is None else f"part-{stall_at:05d}.csv"

    def put(self, key: str, data: bytes) -> None:
        run = xjobs.current()
        assert run is not None
        if key == self.stall and run.attempt == 1:
            run.signal.wait(120)          # until the test's SIGKILL (or a drain) ends the run
            run.signal.raise_if_set()
        with _db().connection() as db:
            db.execute(f"insert into {_schema()}.export_puts (job_id, attempt, key, landed) "
                       f"select %s, %s, %s, count(*) from {_schema()}.job_steps "
                       "where job_id = %s and name like 'page:%%'",
                       (run.job_id, run.attempt, key, run.job_id))
        self.store.put(key, data)


def destination(input) -> PartStore:
    return Recorded(FsspecStore(os.path.join(os.environ["EXPORT_DIR"], input["run"])), input.get("stall_at"))


orders_export = xjobs.export_rows(
    name="orders_export", source=orders, columns=COLUMNS, to=destination, page=PAGE,
    tenant=lambda i: i["org"], queue="exports", idempotency_key=lambda i: f"orders:{i['run']}",
    retry=xjobs.Retry(attempts=20, delay=0, jitter=False))


def every_org(input, cursor, limit):
    """A source that tries to read past its run's tenant."""
    run = xjobs.current()
    assert run is not None
    with run.cross_tenant("export every org's orders"):
        return orders(input, cursor, limit)


escaping_export = xjobs.export_rows(
    name="escaping_export", source=every_org, columns=COLUMNS, to=destination,
    tenant=lambda i: i["org"], queue="exports", idempotency_key=lambda i: f"escape:{i['run']}")

untenanted_escape = xjobs.export_rows(
    name="untenanted_escape", source=every_org, columns=COLUMNS, to=destination,
    tenant="none", queue="exports", idempotency_key=lambda i: f"escape-none:{i['run']}")
