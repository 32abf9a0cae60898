"""An example export: one org's orders of one day, as CSV parts of 1,000 rows each.

    psql "$XJOBS_DATABASE_URL" -c "create table orders (id bigserial primary key, org text,
        placed_at timestamptz default now(), customer text, total numeric)"
    EXPORT_ROOT=/tmp/exports xjobsd run --app examples.export_app
    xjobsd enqueue orders_export --app examples.export_app --input '{"org": "acme", "day": "2026-12-01"}'

The parts land in ``$EXPORT_ROOT/acme/2026-12-01/part-00000.csv``, ``part-00001.csv``, ...
(``EXPORT_ROOT`` may be any fsspec URL: ``s3://bucket/exports`` with ``s3fs`` installed).
A customer named ``=HYPERLINK(...)`` is written ``'=HYPERLINK(...)``: text in a spreadsheet.
"""

from __future__ import annotations

import os

import psycopg

import xjobs


def orders_of_the_day(input, cursor, limit):
    """Keyset paging: the page after the last id read, so a page rerun reads the same rows."""
    with psycopg.connect(os.environ["XJOBS_DATABASE_URL"]) as conn:
        rows = conn.execute(
            "select id, placed_at, customer, total from orders "
            "where org = %s and placed_at >= %s::date and placed_at < %s::date + 1 and id > %s "
            "order by id limit %s",
            (input["org"], input["day"], input["day"], cursor or 0, limit)).fetchall()
    return rows, (rows[-1][0] if len(rows) == limit else None)


orders_export = xjobs.export_rows(
    name="orders_export",
    source=orders_of_the_day,
    columns=["id", "placed_at", "customer", "total"],          # what leaves the building
    to=lambda i: f"{os.environ.get('EXPORT_ROOT', './exports')}/{i['org']}/{i['day']}",
    tenant=lambda i: i["org"],
    page=1000,
    max_part_bytes=16 * 1024 * 1024,
)
