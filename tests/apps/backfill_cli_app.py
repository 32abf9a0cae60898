"""Backfills for the command-line tests: two wait on a migration (an Alembic revision, a Django
migration, their tables in the test's schema), one waits on nothing. Only enqueued, never run."""

from __future__ import annotations

import os

import xjobs

SCHEMA = os.environ.get("XJOBS_SCHEMA", "xjobs")


def nothing(cursor, limit):
    return [], None


def ignore(rows):
    pass


xjobs.backfill(name="migrated", source=nothing, handle=ignore, tenant="none",
               requires=xjobs.backfill_requires.alembic_revision("abc123", table=f"{SCHEMA}.alembic_version"))
xjobs.backfill(name="django_wait", source=nothing, handle=ignore, tenant="none",
               requires=xjobs.backfill_requires.django_migration("users", "0042_email", table=f"{SCHEMA}.django_migrations"))
xjobs.backfill(name="free", source=nothing, handle=ignore, tenant="none")
