"""The Django project of these tests (``tests/django/settings.py``), set up once per test
process on a schema of its own: the queue migrated into it, the app's tables beside it.
Django is configured once per process, so every test here shares that schema; each test
starts from an empty queue and no orders (``project``)."""

from __future__ import annotations

import os
from typing import Iterator

import psycopg
import pytest

pytest.importorskip("django")

from tests.fixtures import drop_schema, new_schema_name  # noqa: E402
from xjobs.drivers.postgres import PostgresDriver  # noqa: E402

SETTINGS = "tests.django.settings"


class Project:
    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema

    def sql(self, query: str, *params: object) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query.replace("{schema}", self.schema), params or None)
            return cur.fetchall() if cur.description is not None else []

    def backend(self):
        from xjobs.contrib.django.compat import task_backends
        return task_backends["default"]


@pytest.fixture(scope="session")
def django_project(pg_dsn: str) -> Iterator[Project]:
    schema = new_schema_name()
    os.environ.update(XJOBS_TEST_DJANGO_DSN=pg_dsn, XJOBS_TEST_DJANGO_SCHEMA=schema,
                      DJANGO_SETTINGS_MODULE=SETTINGS)
    driver = PostgresDriver(pg_dsn, schema=schema, pool_size=1, application_name="xjobs-tests")
    driver.migrate()
    driver.close()
    import django
    from django.core.management import call_command
    from django.db import connections
    django.setup()
    call_command("migrate", run_syncdb=True, verbosity=0)
    try:
        yield Project(pg_dsn, schema)
    finally:
        connections.close_all()
        drop_schema(pg_dsn, schema)


@pytest.fixture
def project(django_project: Project) -> Project:
    django_project.sql("delete from {schema}.jobs; delete from {schema}.shop_order")
    return django_project
