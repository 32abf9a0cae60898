"""``xjobsd run``: the daemon — one supervisor and its worker children.

    xjobsd run --app myapp.jobs [--queue emails=2x16 ...] [--dsn URL] [--config xjobs.toml]
               [--metrics 127.0.0.1:9464 | --metrics off] [--control PATH] [--drain-deadline 25s]

Everything is checked before the first fork, and a refusal exits 2 naming the option: a bad
number (NaN, inf, negative, fractional counts), a queue no registered job uses, a job that
declares ``concurrency=`` (no fleet lease store exists to enforce it), a control socket that
cannot be created, a metrics port in use. Then the schema is installed on a short-lived
connection, closed before any child is forked.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from ..config import Settings, load_settings
from ..errors import ConcurrencyUnenforceable, InvalidOption
from .common import import_apps

log = logging.getLogger("xjobs.supervisor")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run the daemon: a supervisor and its worker processes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--app", action="append", help="module declaring jobs (repeatable)")
    p.add_argument("--dsn", help="PostgreSQL URL (default: XJOBS_DATABASE_URL; none: embedded)")
    p.add_argument("--schema", help="schema holding the queue tables (default: xjobs)")
    p.add_argument("--config", help="a TOML file with an [xjobs] table (default: ./xjobs.toml)")
    p.add_argument("--queue", action="append", metavar="NAME=PROCSxCONC",
                   help="a queue to serve, e.g. emails=2x16 (repeatable; default: every queue at 1x16)")
    p.add_argument("--metrics", metavar="HOST:PORT",
                   help="serve /metrics, /healthz, /readyz here (default 127.0.0.1:9464; 'off' disables)")
    p.add_argument("--control", metavar="PATH", help="control socket (default $XDG_RUNTIME_DIR/xjobsd.sock "
                                                     "or ./.xjobs/xjobsd.sock)")
    p.add_argument("--drain-deadline", metavar="DURATION", help="how long a drain waits for running jobs (25s)")
    p.add_argument("--stats-interval", metavar="DURATION",
                   help="how often queue depth and age are read from the database (5s)")
    p.add_argument("--recycle-after-jobs", metavar="N",
                   help="replace a worker process after it has claimed N jobs")
    p.add_argument("--recycle-above-rss", metavar="MiB",
                   help="replace a worker process whose resident memory exceeds this many MiB")
    p.add_argument("--log-level", default=os.environ.get("XJOBS_LOG_LEVEL", "INFO"),
                   help="DEBUG, INFO, WARNING or ERROR (default INFO, or XJOBS_LOG_LEVEL)")
    p.set_defaults(handler=run)


def _load(args: argparse.Namespace, dsn: str | None = None) -> Settings:
    return load_settings(args.config, dsn=args.dsn or dsn, schema=args.schema, queues=args.queue,
                         metrics=args.metrics, control=args.control, apps=args.app,
                         drain_deadline=args.drain_deadline, stats_interval=args.stats_interval,
                         recycle_after_jobs=args.recycle_after_jobs,
                         recycle_above_rss=args.recycle_above_rss)


def _options(settings: Settings) -> Any:
    from ..supervisor.arbiter import ArbiterOptions
    rss = settings.recycle_above_rss_mib
    return ArbiterOptions(stats_interval_s=settings.stats_interval_ms / 1000.0,
                          recycle_jobs=settings.recycle_after_jobs,
                          recycle_rss_bytes=None if rss is None else rss * 1024 * 1024)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=str(args.log_level).upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)   # it narrates every initdb line
    from ..registry import REGISTRY
    from ..supervisor import control as control_mod
    from ..supervisor.arbiter import Arbiter
    from ..supervisor.metrics import MetricsEndpoint
    from ..supervisor.probe import DatabaseProbe, default_driver_factory
    from ..supervisor.roles import role_specs

    settings = _load(args)
    options = _options(settings)
    if not settings.apps:
        raise InvalidOption("app", "no job modules: pass --app MODULE (or apps = [...] in the config)")
    import_apps(settings.apps)
    try:
        specs = role_specs(settings, REGISTRY)
    except ConcurrencyUnenforceable as exc:
        print(f"xjobsd: {exc}", file=sys.stderr)
        return 2
    embedded = None
    if not settings.dsn:
        from ..supervisor.embedded import start_embedded
        dsn, embedded = start_embedded()
        settings = settings.with_overrides(dsn=dsn)
        specs = role_specs(settings, REGISTRY)
    metrics = None
    if settings.metrics and settings.metrics.lower() not in ("off", "none", "0"):
        metrics = MetricsEndpoint(settings.metrics)
    control_path = settings.control or control_mod.default_path()
    listener = control_mod.bind(control_path)
    try:
        _migrate(settings)
        pinned_dsn = settings.dsn

        def configure() -> tuple[Settings, list]:
            fresh = _load(args, dsn=pinned_dsn)
            if not fresh.dsn:
                fresh = fresh.with_overrides(dsn=pinned_dsn)
            import_apps(fresh.apps)
            return fresh, role_specs(fresh, REGISTRY)

        arbiter = Arbiter(settings, specs, options=options, configure=configure,
                          make_probe=lambda **kw: DatabaseProbe(
                              lambda: default_driver_factory(arbiter.settings)(), **kw),
                          metrics=metrics, control=(control_path, listener))
        return arbiter.run()
    finally:
        control_mod.unlink_socket(control_path)   # only if still ours; before the listener closes
        listener.close()
        if metrics is not None:
            metrics.server.server_close()
        if embedded is not None:
            embedded.cleanup()


def _migrate(settings: Settings) -> None:
    import psycopg
    from ..drivers.postgres import PostgresDriver
    from ..errors import XJobsError
    driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name="xjobsd-migrate")
    try:
        driver.migrate()   # its own connection, closed on return: nothing crosses the fork
    except psycopg.Error as exc:
        raise XJobsError(f"cannot install the schema: {exc}".strip(), code="X_DATABASE_UNAVAILABLE") from None
    finally:
        driver.close()
