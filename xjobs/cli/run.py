"""``xjobsd run``: the daemon — one supervisor and its worker children.

    xjobsd run --app myapp.jobs | --django mysite.settings [--queue emails=2x16|emails=64 ...] [--dsn URL] [--config xjobs.toml]
               [--metrics 127.0.0.1:9464 | --metrics off] [--control PATH] [--drain-deadline 25s]
               [--strict] [--embedded] [--ui HOST:PORT [--ui-actions] [--ui-trust-header NAME]]
               [--no-migrate]

Everything is checked before the first fork, and a refusal exits 2 naming the option: a bad
number (NaN, inf, negative, fractional counts), a queue no registered job uses, an app module
that fails to import (one line; the traceback at ``--log-level debug``), a control socket
that cannot be created, a metrics or dashboard port in use, and with ``--strict`` a registered job whose
queue no process serves (without it, a warning at start and in ``xjobsd status``). Then the
schema is installed or upgraded on a short-lived connection, closed before any child is
forked; a schema newer than this code that does not serve it (``X_SCHEMA_TOO_NEW``), and with
``--no-migrate`` an older one (``X_SCHEMA_OUTDATED``), is refused with exit 2. Then a banner
says what runs where and what to try next.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..config import Settings, load_settings
from ..errors import InvalidOption
from ..logs import configure_logging, event
from . import here, setting_flags
from .common import add_config_flag, add_log_flags, export_environment, import_apps
from .django_app import with_django

if TYPE_CHECKING:
    import socket
    from pathlib import Path

    from ..registry import Registry
    from ..supervisor.metrics import MetricsEndpoint
    from ..supervisor.probe import DatabaseProbe
    from ..supervisor.slots import RoleSpec

log = logging.getLogger("xjobs.supervisor")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the daemon: a supervisor and its worker processes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    setting_flags.add(p, "apps", "django", "database_url", "schema")
    add_config_flag(p)
    setting_flags.add(p, "queues", "metrics", "control", "drain_deadline", "stats_interval",
                      "recycle_after_jobs", "recycle_above_rss")
    p.add_argument("--strict", action="store_true",
                   help="refuse to start when a registered job's queue is served by no process")
    setting_flags.add(p, "ui", "ui_actions", "ui_trust_header")
    p.add_argument("--embedded", action="store_true",
                   help="start the embedded PostgreSQL when no database is configured, even under systemd")
    setting_flags.add(p, "migrate")
    add_log_flags(p)
    p.set_defaults(handler=run)


def _load(args: argparse.Namespace, dsn: str | None = None) -> Settings:
    """What the command line, the environment and the file say; ``dsn`` stands in for a
    database the command line does not name; with ``--django``, the project's modules too."""
    from .django_app import apps_of
    settings = load_settings(args.config, **{"database_url": dsn, **setting_flags.given(args)})
    return settings.with_overrides(apps=apps_of(settings))


def _options(settings: Settings) -> Any:
    from ..supervisor.arbiter import ArbiterOptions
    rss = settings.recycle_above_rss_mib
    return ArbiterOptions(stats_interval_s=settings.stats_interval_ms / 1000.0,
                          recycle_jobs=settings.recycle_after_jobs,
                          recycle_rss_bytes=None if rss is None else rss * 1024 * 1024)


def run(args: argparse.Namespace) -> int:
    log_format = configure_logging(args.log_level, args.log_format)
    from ..registry import REGISTRY
    from ..control_client import default_path
    from ..supervisor import control as control_mod
    from . import embedded as embedded_mod
    from ..supervisor.arbiter import Arbiter
    from ..supervisor.metrics import MetricsEndpoint
    from ..supervisor.appcode import AppCode
    from ..supervisor.probe import DatabaseProbe, default_driver_factory
    from ..supervisor.reload import Configuration
    from ..supervisor.roles import (ROLES, RoleKind, describe_unserved, queue_specs, refuse_unserved,
                                    registered_queues, role_specs, unserved_jobs)

    settings = _load(args)
    export_environment(settings)
    options = _options(settings)
    if not settings.apps and not settings.django:
        raise InvalidOption("app", "no job modules: pass --app MODULE or --django SETTINGS "
                                   "(or apps = [...] in the config)")
    control_path = os.path.abspath(settings.control or default_path())
    here.refuse_second(control_path, settings.metrics)   # before anything is imported or bound
    settings = with_django(args, settings)
    import_apps(settings.apps)
    app = AppCode(settings.apps, REGISTRY)
    roles, ui_socket = ROLES, None
    if settings.ui:
        from ..ui import listen as ui_listen
        ui_listen.check_installed()
        here.warn_unprotected(settings)
        ui_socket = ui_listen.bind(settings.ui)
        roles = ROLES + (RoleKind(ui_listen.ROLE, ui_listen.POLICY, ui_listen.builder(ui_socket, control_path),
                                  runs_app=ui_listen.RUNS_APP),)
    specs = role_specs(settings, REGISTRY, roles)
    stranded = unserved_jobs(settings, REGISTRY)
    if stranded:
        if args.strict:
            refuse_unserved(settings, REGISTRY)
        log.warning("no process serves these registered jobs; they wait until a daemon serves "
                    "their queue (xjobsd scale QUEUE =1 adds one): %s", describe_unserved(stranded))
    embedded = pgdata = None
    if not settings.dsn:
        if os.environ.get("NOTIFY_SOCKET") and not args.embedded:
            raise InvalidOption("dsn", "no database configured under systemd: set XJOBS_DATABASE_URL in "
                                       "the environment file (or pass --embedded for a private one)")
        dsn, embedded, pgdata = embedded_mod.start_embedded()
        settings = settings.with_overrides(dsn=dsn)
        specs = role_specs(settings, REGISTRY, roles)
    metrics = None
    if settings.metrics and settings.metrics.lower() not in ("off", "none", "0"):
        metrics = MetricsEndpoint(settings.metrics)
    listener = control_mod.bind(control_path)
    recorded = False
    try:
        _migrate(settings)
        at_start = settings

        def read() -> Settings:
            """The configuration as it reads now, on the database and schema the daemon
            started with (migrated then; the supervisor's own sessions use them)."""
            fresh = _load(args, dsn=at_start.dsn)
            if fresh.schema != at_start.schema:
                log.warning("reload: the schema changes only at the next start (%s -> %s); "
                            "staying on %s", at_start.schema, fresh.schema, at_start.schema)
            return fresh.with_overrides(dsn=at_start.dsn, schema=at_start.schema)

        # the app's modules are imported again by a reload that finds them changed (after a
        # fresh process has validated them), and the groups built from what it registered
        # a Django project is not imported again: Django populates its apps once per process, so
        # a reload re-reads the configuration only, and new Django code takes a restart
        configuration = Configuration(read=read, groups=lambda fresh: role_specs(fresh, REGISTRY, roles),
                                      app=None if settings.django else app, strict=args.strict)
        def make_probe(settings: Callable[[], Settings], **options: Any) -> DatabaseProbe:
            return DatabaseProbe(lambda: default_driver_factory(settings())(), names=lambda: app.job_names,
                                 **options)

        def make_queue_specs(running: Settings, queue: str, processes: int, concurrency: int) -> list[RoleSpec]:
            return queue_specs(running, REGISTRY, queue, processes, concurrency)
        arbiter = Arbiter(settings, specs, options=options, configuration=configuration,
                          make_probe=make_probe, metrics=metrics, control=(control_path, listener),
                          registered=registered_queues(REGISTRY), make_queue_specs=make_queue_specs)
        recorded = here.record(settings, control_path, metrics.address if metrics else None, pgdata)
        facts = started(settings, specs, REGISTRY, control_path, metrics, pgdata, embedded_mod.os_user(),
                        stranded, ui_socket)
        if log_format == "json":   # one event among the JSON lines, never a block of text
            event(log, logging.INFO, "daemon.started", "xjobsd %s started", facts["pid"], **facts)
        else:
            print(banner(facts), file=sys.stderr, flush=True)
        return arbiter.run()
    finally:
        control_mod.unlink_socket(control_path)   # only if still ours; before the listener closes
        listener.close()
        if metrics is not None:
            metrics.server.server_close()
        if ui_socket is not None:
            ui_socket.close()
        if recorded:
            embedded_mod.forget_daemon(os.getpid())
        if embedded is not None:
            embedded.cleanup()


def started(settings: Settings, specs: list[RoleSpec], registry: Registry, control: str,
            metrics: MetricsEndpoint | None, pgdata: Path | None, db_user: str | None,
            stranded: dict[str, list[str]], ui_socket: socket.socket | None = None) -> dict[str, Any]:
    """What runs where: the fields of the ``daemon.started`` event, and what the text banner
    says."""
    from psycopg.conninfo import conninfo_to_dict
    jobs_by_queue: dict[str, list[str]] = {}
    for handle in registry.jobs():
        jobs_by_queue.setdefault(handle.queue, []).append(handle.name)
    ordered = sorted(specs, key=lambda s: (not s.policy.per_queue, s.role, s.queue or ""))
    database: dict[str, Any] = {"schema": settings.schema}
    if pgdata is not None:
        # a private server on this machine: its URL is what the other commands need
        database.update(embedded=True, pgdata=str(pgdata), os_user=db_user, url=settings.dsn)
    else:
        where = conninfo_to_dict(settings.dsn or "")   # a dsn is configured by now
        database.update(embedded=False, host=where.get("host") or "local socket",
                        port=int(where.get("port") or 5432),
                        dbname=where.get("dbname") or where.get("user") or "")
    first = next((h for h in registry.jobs() if h.queue not in stranded), None)
    return {
        "pid": os.getpid(), "apps": list(settings.apps),
        "queues": [{"queue": s.queue, "processes": s.processes, "concurrency": s.concurrency,
                    "jobs": jobs_by_queue.get(s.queue, [])}
                   for s in ordered if s.policy.per_queue and s.queue is not None],
        "roles": [s.role for s in ordered if not (s.policy.per_queue and s.queue is not None)],
        "unserved": {queue: names for queue, names in sorted(stranded.items())},
        "database": database, "control": control,
        "metrics": None if metrics is None else f"http://{metrics.address}/metrics",
        "dashboard": None if ui_socket is None else _dashboard(ui_socket, settings.ui_actions),
        "example_job": None if first is None else first.name,
    }


def _dashboard(ui_socket: socket.socket, actions: bool) -> str:
    from ..ui.listen import announce
    return announce(ui_socket, actions)


def banner(facts: dict[str, Any]) -> str:
    """``started`` as text, and what to try next: the first thing a new user reads."""
    lines = [f"xjobsd {facts['pid']}: app {', '.join(facts['apps'])}"]
    for q in facts["queues"]:
        lines.append(f"  queue {q['queue']}: {q['processes']} process(es) x {q['concurrency']} slot(s); "
                     f"jobs {', '.join(q['jobs']) or '-'}")
    for role in facts["roles"]:
        lines.append(f"  {role}: 1 process")
    for queue, names in facts["unserved"].items():
        lines.append(f"  queue {queue}: NOT SERVED by this daemon; jobs {', '.join(names)}")
    db = facts["database"]
    if db["embedded"]:
        lines.append(f"  database: embedded PostgreSQL in {db['pgdata']}"
                     + (f" (run by the OS user {db['os_user']!r}: PostgreSQL refuses to run as root)"
                        if db["os_user"] else "")
                     + f", schema {db['schema']}")
        lines.append(f"            XJOBS_DATABASE_URL={db['url']}")
    else:
        lines.append(f"  database: {db['host']}:{db['port']}/{db['dbname']}, schema {db['schema']}")
    lines.append(f"  control socket: {facts['control']}")
    if facts["metrics"] is not None:
        lines.append(f"  metrics: {facts['metrics']}")
    if facts["dashboard"] is not None:
        lines.append(f"  dashboard: {facts['dashboard']}")
    command, activate = here.command()
    lines.append("  try, from this directory" + (f" (or `{activate}` first, then plain `xjobsd`)"
                                                 if activate else "") + ":")
    lines.append(f"    {command} status")
    if facts["example_job"] is not None:   # the app is found from this directory: no --app
        lines.append(f"    {command} enqueue {facts['example_job']} --input '{{...}}'")
    lines.append(f"    {command} jobs ls")
    lines.append(f"    {command} queues ls")
    return "\n".join(lines)


def _migrate(settings: Settings) -> None:
    from ..drivers.postgres import PostgresDriver
    from ..errors import DriverError, XJobsError
    if not settings.dsn:   # run() starts the embedded database first when none is configured
        raise InvalidOption("dsn", "no database configured: pass --dsn or set XJOBS_DATABASE_URL")
    driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name="xjobsd-migrate")
    try:
        # its own connection, closed on return: nothing crosses the fork; the migrations it
        # applies are logged as it goes (schema.migrated)
        driver.migrate(upgrade=settings.migrate)
    except DriverError as exc:
        raise XJobsError(f"cannot install the schema: {exc.args[0]}".strip(),
                         code="X_DATABASE_UNAVAILABLE") from None
    finally:
        driver.close()
