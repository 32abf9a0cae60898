"""What the subcommands share: database and control-socket flags, settings, app import, exit
codes, printing JSON and tables (the values themselves are formatted by ``xjobs/formatting.py``,
which the dashboard shares)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

import orjson

from ..config import Settings, find_setting, load_settings
from ..formatting import plain
from ..errors import (AppInvalid, IdempotencyKeyRequired, InvalidOption, PayloadInvalid, PayloadTooLarge,
                      TenantRequired, UnknownJob)
from . import setting_flags

if TYPE_CHECKING:
    from ..drivers.base import JobDriver

# refusals of what the user typed, configured or deployed: exit 2, like argparse's own
USAGE_ERRORS = (InvalidOption, UnknownJob, PayloadInvalid, PayloadTooLarge, TenantRequired,
                IdempotencyKeyRequired, AppInvalid)
_USAGE_CODES = frozenset(cls.code for cls in USAGE_ERRORS)


def refusal_exit_code(code: str | None) -> int:
    """2 when a refusal's code says the input was wrong, else 1: the same split ``main``
    makes for exceptions, for refusals that come back over the control socket as codes."""
    return 2 if code in _USAGE_CODES else 1


def add_database_flags(parser: argparse.ArgumentParser) -> None:
    # with no database named, these commands find the embedded one ``run`` keeps
    # (settings_from) and never start one: their --dsn says less than run's
    setting_flags.add(parser, "database_url", "schema",
                      help={"database_url": "PostgreSQL URL (default: XJOBS_DATABASE_URL)"})
    add_config_flag(parser)


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="a TOML file with an [xjobs] table (default: ./xjobs.toml)")


def add_control_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control", metavar="PATH",
                        help="the daemon's control socket (default: XJOBS_CONTROL, else "
                             "$XDG_RUNTIME_DIR/xjobsd.sock or ./.xjobs/xjobsd.sock)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def ask_daemon(args: argparse.Namespace, command: str, **fields: Any) -> dict[str, Any]:
    """One request over the control socket; ``ControlUnavailable`` (exit 1) when none answers."""
    from ..control_client import request
    path = args.control or os.environ.get("XJOBS_CONTROL") or client_path()
    return request(path, command, **fields)


def client_path() -> str:
    """Where a command looks for the daemon when told nothing: the control socket the daemon
    running from this directory recorded (``./.xjobs/daemon.json``), else ``default_path()``."""
    from ..control_client import default_path
    from .embedded import recorded_daemon
    info = recorded_daemon()
    control = info.get("control") if info is not None else None
    return control if isinstance(control, str) else default_path()


def settings_from(args: argparse.Namespace) -> Settings:
    """Flags, environment and file; with no database configured, the embedded one that
    ``xjobsd run`` keeps under ``./.xjobs/`` (the daemon's own record of it, or the server
    started for this command)."""
    flags = setting_flags.given(args)
    settings = load_settings(getattr(args, "config", None), **flags)
    if settings.dsn:
        return settings
    from .embedded import local_database
    found = local_database()
    if found is None:
        return settings
    dsn, schema = found
    explicit_schema = "schema" in flags or os.environ.get(find_setting("schema").env)
    return settings.with_overrides(dsn=dsn, schema=None if explicit_schema else schema)


def driver_from(settings: Settings, application_name: str = "xjobs-cli", **pool_options: Any) -> "JobDriver":
    """A driver for one command, after one quick connection proves the database answers:
    an operator wants "cannot connect" in seconds, not a pool retrying for half a minute.
    ``pool_options`` override the one-connection pool (``pool_size``, ``statement_timeout_ms``)."""
    if not settings.dsn:
        raise InvalidOption("dsn", "no database configured: pass --dsn or set XJOBS_DATABASE_URL")
    from ..drivers.postgres import PostgresDriver
    driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name=application_name,
                            **{"pool_size": 1, "pool_timeout": 10.0, **pool_options})
    try:
        driver.ping(5)    # DatabaseUnavailable within seconds when nothing answers
    except BaseException:
        driver.close()
        raise
    return driver


def import_apps(modules: list[str] | tuple[str, ...]) -> None:
    """Import the application's job modules so their ``@job`` declarations register.

    A module that fails to import, for whatever reason, is refused in one line naming it and
    the error (exit 2: systemd's ``RestartPreventExitStatus=2`` then stops restarting what a
    restart cannot mend); the traceback is logged at debug level."""
    from ..supervisor.appcode import import_modules
    try:
        import_modules(modules)
    except AppInvalid as exc:   # at start, the app is one more option that was given wrong
        raise InvalidOption("app", exc.args[0]) from None


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(plain(value), option=orjson.OPT_INDENT_2).decode() + "\n")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default=None,
                        help="DEBUG, INFO, WARNING or ERROR (default INFO, or XJOBS_LOG_LEVEL)")
    parser.add_argument("--log-format", default=None, choices=("text", "json"),
                        help="text for people, json for machines: one object per line (default text, "
                             "or XJOBS_LOG_FORMAT)")
