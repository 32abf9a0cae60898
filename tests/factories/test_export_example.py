"""``examples/export_app.py`` does what its docstring says: one org's orders of one day, read
from a real PostgreSQL table, as CSV parts of 1,000 rows under ``$EXPORT_ROOT/<org>/<day>``."""

from __future__ import annotations

import csv
import importlib
import io
import sys

import psycopg
import pytest

import xjobs
from tests.fixtures import drop_schema, new_schema_name
from tests.worker.pacing import Pacer, enqueue, make_worker

pytestmark = pytest.mark.postgres


@pytest.fixture
def orders_schema(pg_dsn):
    schema = new_schema_name()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create schema {schema}; create table {schema}.orders (id bigserial primary key, "
                     "org text, placed_at timestamptz default now(), customer text, total numeric)")
        conn.execute(f"insert into {schema}.orders (org, placed_at, customer, total) "
                     "select case when i % 50 = 0 then 'other' else 'acme' end, "
                     "timestamptz '2026-12-01 12:00Z' + (i % 3) * interval '1 hour', "
                     "case when i = 7 then '=HYPERLINK(\"http://x\")' else 'customer ' || i end, "
                     "case when i % 10 = 0 then -i else i end from generate_series(1, 2600) i")
        conn.execute(f"insert into {schema}.orders (org, placed_at, customer, total) "
                     "values ('acme', '2026-12-03 12:00Z', 'another day', 1)")
    try:
        yield schema
    finally:
        drop_schema(pg_dsn, schema)


def test_the_example_exports_one_orgs_day_in_parts_of_a_thousand(pg_dsn, orders_schema, tmp_path, monkeypatch,
                                                                 memory_driver):
    separator = "&" if "?" in pg_dsn else "?"
    monkeypatch.setenv("XJOBS_DATABASE_URL", f"{pg_dsn}{separator}options=-csearch_path%3D{orders_schema}")
    monkeypatch.setenv("EXPORT_ROOT", str(tmp_path))
    monkeypatch.setenv("PGTZ", "UTC")
    saved = xjobs.REGISTRY.snapshot()
    xjobs.REGISTRY.clear()      # the example alone, as xjobsd --app examples.export_app sees it
    try:
        sys.modules.pop("examples.export_app", None)
        example = importlib.import_module("examples.export_app")
        [job_id] = enqueue(example.orders_export, memory_driver, {"org": "acme", "day": "2026-12-01"})
        pacer = Pacer(make_worker(memory_driver, xjobs.REGISTRY, queue="default"))
        pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=100)
    finally:
        xjobs.REGISTRY.restore(saved)
        sys.modules.pop("examples.export_app", None)
    assert memory_driver.job_get(job_id).tenant == "acme"
    folder = tmp_path / "acme" / "2026-12-01"
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    rows = [r for name in names for r in list(csv.reader(io.StringIO((folder / name).read_text(), newline="")))[1:]]
    assert len(rows) == 2600 - 2600 // 50
    by_id = {int(r[0]): r for r in rows}
    assert by_id[7][2] == "'=HYPERLINK(\"http://x\")" and by_id[10][3] == "-10"
    assert by_id[1][1].startswith("2026-12-01T1")
