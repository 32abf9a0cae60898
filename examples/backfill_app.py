"""A backfill over an application table: lower-case every user's email into a new column.

    psql "$XJOBS_DATABASE_URL" -c "create table users (id bigint primary key, email text, email_lower text);
        insert into users (id, email) select n, 'User' || n || '@Example.com' from generate_series(1, 50000) n"
    xjobsd run --app examples.backfill_app --queue backfills=1x1
    xjobsd backfill ls --app examples.backfill_app
    xjobsd backfill run users_email_lower --app examples.backfill_app

``handle`` is idempotent (it sets a value derived from the row), because a page may be handled
twice: once by an attempt that was killed before its checkpoint, once by the retry. ``count``
says whether the sweep converged: rows still unset after the last page are ``X_BACKFILL_STALLED``.
"""

from __future__ import annotations

import os
import threading

import psycopg

import xjobs

_local = threading.local()


def _db() -> psycopg.Connection:
    """One autocommit connection per thread (the worker runs bodies on a pool of threads)."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["XJOBS_DATABASE_URL"], autocommit=True)
    return conn


def unset_emails(cursor, limit):
    ids = [row[0] for row in _db().execute(
        "select id from users where email_lower is null and id > %s order by id limit %s",
        (cursor or 0, limit)).fetchall()]
    return ids, (ids[-1] if len(ids) == limit else None)


def lower_emails(ids):
    _db().execute("update users set email_lower = lower(email) where id = any(%s)", (ids,))


def emails_left(ctx):
    row = _db().execute("select count(*) from users where email_lower is null").fetchone()
    return row[0] if row else 0


users_email_lower = xjobs.backfill(
    name="users_email_lower", source=unset_emails, handle=lower_emails, count=emails_left,
    batch=1000, rate=5, tenant="none", queue="backfills")
