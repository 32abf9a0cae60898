"""Ready-made ``requires=`` preconditions for a backfill: a migration it waits on.

Each answers a callable ``check(conn)`` that the CLI gate calls with a psycopg connection to the
queue's database (the app's tables are expected there): True when met, else the reason it is
not. They read the migration tools' own tables with plain SQL, so xjobs depends on neither
Alembic nor Django::

    xjobs.backfill(..., requires=xjobs.backfill_requires.alembic_revision("3f2a9c1d"))
    xjobs.backfill(..., requires=xjobs.backfill_requires.django_migration("users", "0042_email_lower"))

A precondition that cannot be read (no connection: a driver without a database; a missing
table) is not met, and says why.
"""

from __future__ import annotations

from typing import Any, Callable

from ..options import plain_name

Check = Callable[[Any], "bool | str"]


def _table(name: str) -> Any:
    from psycopg import sql
    return sql.SQL(".").join(sql.Identifier(part) for part in name.split("."))


def _read(conn: Any, query: Any, params: tuple[object, ...]) -> list[tuple[Any, ...]] | str:
    import psycopg
    if conn is None:
        return "no database connection to read it on"
    try:
        with conn.transaction():
            return list(conn.execute(query, params).fetchall())
    except psycopg.errors.UndefinedTable as exc:
        return f"its table is missing ({exc.diag.message_primary})"


def alembic_revision(revision: str, *, table: str = "alembic_version") -> Check:
    """Met while Alembic's ``alembic_version`` holds ``revision`` as a current head. Alembic
    keeps only the heads, so this is exact: run the backfill in the deploy that applies
    ``revision``, before a later migration moves the head on."""
    revision = plain_name(revision, "alembic_revision")
    table = plain_name(table, "alembic_revision.table")

    def check(conn: Any) -> bool | str:
        from psycopg import sql
        rows = _read(conn, sql.SQL("select version_num from {}").format(_table(table)), ())
        if isinstance(rows, str):
            return f"alembic revision {revision}: {rows}"
        heads = sorted(str(row[0]) for row in rows)
        return True if revision in heads else f"alembic is at {', '.join(heads) or 'no revision'}, not {revision}"
    check.__qualname__ = f"alembic_revision({revision!r})"
    return check


def django_migration(app: str, name: str, *, table: str = "django_migrations") -> Check:
    """Met once Django recorded migration ``name`` of ``app`` as applied (``django_migrations``)."""
    app, name = plain_name(app, "django_migration.app"), plain_name(name, "django_migration.name")
    table = plain_name(table, "django_migration.table")

    def check(conn: Any) -> bool | str:
        from psycopg import sql
        rows = _read(conn, sql.SQL("select 1 from {} where app = %s and name = %s").format(_table(table)),
                     (app, name))
        if isinstance(rows, str):
            return f"django migration {app}.{name}: {rows}"
        return True if rows else f"django migration {app}.{name} is not applied"
    check.__qualname__ = f"django_migration({app!r}, {name!r})"
    return check


__all__ = ["alembic_revision", "django_migration"]
