"""``XJobsBackend``: Django's Tasks framework on xjobs.

    TASKS = {"default": {"BACKEND": "xjobs.contrib.django.XJobsBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"retry": {"attempts": 3}, "timeout": "5m"}}}

A ``@task`` function is an xjobs job (``jobs.py``). ``enqueue()`` inside
``transaction.atomic()`` writes the job on Django's own connection, in that transaction: the
job exists only if the view's writes commit. Outside one it is written at once, on the
queue's own pool. ``get_result()`` reads the job back as a ``TaskResult``.

Where the queue lives: ``OPTIONS["database_url"]``, else xjobs' own settings
(``XJOBS_DATABASE_URL``, ``xjobs.toml``, ``xjobs.configure``), else the Django database named
by ``OPTIONS["database"]`` (``"default"``); the schema is ``OPTIONS["schema"]``, else xjobs'
setting. A transaction is joined on the Django database ``OPTIONS["database"]``, so the queue's
schema must be in that database for ``atomic()`` to hold both.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from ...config import current_driver, current_settings
from ...drivers.base import JobDriver
from ...drivers.sql import check_schema_name
from ...enqueue import enqueue_many
from ...errors import InvalidOption, JobNotFound, XJobsError
from ...options import duration_ms, plain_name
from ...registry import JobHandle
from ...retry import Retry
from . import jobs
from .compat import BaseTaskBackend, InvalidTask, Task, TaskResult, TaskResultDoesNotExist, task_enqueued

# Django tasks do not retry unless told: a task that raises is FAILED, as Django's own backends say
DEFAULT_RETRY = Retry(attempts=1)
_OPTIONS = frozenset({"database", "database_url", "schema", "retry", "timeout"})
# the keys of Django's connection parameters that are also libpq's (the rest are psycopg objects)
_CONNINFO_KEYS = ("dbname", "user", "password", "host", "port", "options", "sslmode", "sslrootcert",
                  "sslcert", "sslkey", "passfile", "service", "target_session_attrs", "connect_timeout")


def _retry(value: object) -> Retry:
    if value is None:
        return DEFAULT_RETRY
    if isinstance(value, Retry):
        return value
    if isinstance(value, Mapping):
        try:
            return Retry(**value)
        except TypeError as exc:
            raise InvalidOption("django.retry", str(exc)) from None
    raise InvalidOption("django.retry", f"must be an xjobs.Retry or a dict of its arguments, got {value!r}")


def django_dsn(alias: str) -> str:
    """A libpq connection string for the Django database ``alias`` (PostgreSQL only)."""
    from django.db import connections
    from psycopg.conninfo import make_conninfo
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise InvalidOption("django.database", f"the Django database {alias!r} is {connection.vendor}; "
                                               "xjobs needs PostgreSQL")
    params = connection.get_connection_params()
    return str(make_conninfo("", **{k: v for k, v in params.items()
                                    if k in _CONNINFO_KEYS and v not in (None, "")}))


class TransactionUnjoinable(XJobsError):
    """``enqueue()`` inside ``atomic()`` on a Django database the job cannot join."""

    code = "X_DJANGO_TRANSACTION_UNJOINABLE"


class XJobsBackend(BaseTaskBackend):
    """A Django Tasks backend whose tasks run as xjobs jobs, under ``xjobsd run --django``."""

    supports_defer = True          # run_after: the job's run_at
    supports_async_task = True     # an async def task is called through async_to_sync
    supports_get_result = True     # any process reads the job back
    supports_priority = True       # -100..100, higher first: the job's priority, negated

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - _OPTIONS
        if unknown:
            raise InvalidOption("django.options", f"unknown option(s) {', '.join(sorted(unknown))}; "
                                                  f"known: {', '.join(sorted(_OPTIONS))}")
        self.database = plain_name(self.options.get("database", "default"), "django.database")
        self.retry = _retry(self.options.get("retry"))
        timeout = self.options.get("timeout")
        self.timeout = None if timeout is None else duration_ms(timeout, "django.timeout", exclusive_minimum=True)
        for queue in self.queues:
            plain_name(queue, "django.queues")
        if self.options.get("schema") is not None:
            check_schema_name(self.options["schema"])
        url = self.options.get("database_url")
        if url is not None and not (isinstance(url, str) and url):
            raise InvalidOption("django.database_url", f"must be a PostgreSQL URL, got {url!r}")
        self._driver: JobDriver | None = None
        self._lock = threading.Lock()

    # -- where the queue lives -----------------------------------------------------------------

    def location(self) -> tuple[str, str]:
        """(the queue's database URL, its schema), as the module doc says."""
        settings = current_settings()
        schema = self.options.get("schema") or settings.schema
        dsn = self.options.get("database_url") or settings.dsn or django_dsn(self.database)
        return str(dsn), str(schema)

    def driver(self) -> JobDriver:
        with self._lock:
            if self._driver is None:
                settings = current_settings()
                if not (self.options.get("database_url") or self.options.get("schema")) and settings.dsn:
                    self._driver = current_driver()   # xjobs' own configuration: one pool per process
                else:
                    from ...drivers.postgres import PostgresDriver
                    dsn, schema = self.location()
                    self._driver = PostgresDriver(dsn, schema=schema, application_name=f"django-tasks-{self.alias}")
            return self._driver

    # -- the backend contract --------------------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, then the task's job declared (``jobs.declare``); a queue name xjobs
        refuses is ``InvalidTask`` too."""
        super().validate_task(task)
        self._declare(task)

    def _declare(self, task: Task[Any, Any]) -> JobHandle:
        try:
            return jobs.declare(task, retry=self.retry, timeout=self.timeout)
        except InvalidOption as exc:
            raise InvalidTask(str(exc)) from exc

    def enqueue(self, task: Task[Any, Any], args: Iterable[Any], kwargs: Mapping[str, Any]) -> TaskResult[Any]:
        super().validate_task(task)
        handle = self._declare(task)
        # built first: Django's TaskResult refuses what JSON cannot carry, as every backend does
        result = jobs.result_for(task, "", list(args), dict(kwargs), enqueued=datetime.now(timezone.utc))
        run_at = task.run_after
        if run_at is not None and run_at.tzinfo is None:   # USE_TZ = False: Django's local time
            from django.utils.timezone import make_aware
            run_at = make_aware(run_at)
        [done] = enqueue_many(handle, [jobs.envelope(task, result.args, result.kwargs)], run_at=run_at,
                              priority=-task.priority, conn=self._joined(), enqueued_by=f"django:{self.alias}",
                              driver=self.driver())
        object.__setattr__(result, "id", str(done.id))
        task_enqueued.send(type(self), task_result=result)
        return result

    def _joined(self) -> Any:
        """Django's connection, when a transaction is open on it: the job joins it. A database
        the job cannot join (not PostgreSQL, or not through psycopg 3) is refused rather than
        written beside the transaction: a rollback would leave the job behind."""
        from django.db import connections
        connection = connections[self.database]
        if not connection.in_atomic_block:
            return None
        import psycopg
        raw = None
        if connection.vendor == "postgresql":
            connection.ensure_connection()
            raw = connection.connection
        if not isinstance(raw, psycopg.Connection):
            raise TransactionUnjoinable(
                f"enqueue() inside atomic() joins the transaction of the Django database {self.database!r}, "
                f"which is {connection.vendor} {'through psycopg2' if raw is not None else ''}".rstrip()
                + "; the job can join only a PostgreSQL transaction on psycopg 3",
                hint="enqueue after the transaction (transaction.on_commit), or point OPTIONS['database'] "
                     "at the PostgreSQL database the queue lives in")
        return raw

    def get_result(self, result_id: str) -> TaskResult[Any]:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        driver, joined = self.driver(), self._joined()
        try:
            # in the caller's transaction when one is open: a job it enqueued is found before it commits
            from ...drivers.postgres import PostgresDriver
            view = (driver.job_get(job_id, joined) if joined is not None and isinstance(driver, PostgresDriver)
                    else driver.job_get(job_id))
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        task = jobs.task_of(view.name)
        if task is None:
            raise TaskResultDoesNotExist(result_id)
        return jobs.read_back(view, task)


__all__ = ["DEFAULT_RETRY", "TransactionUnjoinable", "XJobsBackend", "django_dsn"]
