"""What the subcommands share: database and control-socket flags, settings, app import, exit
codes, printing JSON and tables (the values themselves are formatted by ``xjobs/formatting.py``,
which the dashboard shares)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson

from ..config import Settings, find_setting, load_settings
from ..formatting import plain
from ..errors import (AppInvalid, DaemonRunning, ExtraMissing, IdempotencyKeyRequired, InvalidOption, PayloadInvalid,
                      PayloadTooLarge, SchemaMissing, TenantRequired, UnknownJob, UnknownQueue, UsageInvalid,
                      XJobsError)
from . import setting_flags

if TYPE_CHECKING:
    from ..drivers.base import JobDriver

# refusals of what the user typed, configured or deployed: exit 2, like a refused start. A
# missing schema among them: a restart cannot mend it, and most often the schema is misspelt;
# a missing extra too: installing it mends it, a restart does not
USAGE_ERRORS = (InvalidOption, UsageInvalid, UnknownJob, UnknownQueue, PayloadInvalid, PayloadTooLarge,
                TenantRequired, IdempotencyKeyRequired, AppInvalid, DaemonRunning, SchemaMissing, ExtraMissing)
_USAGE_CODES = frozenset(cls.code for cls in USAGE_ERRORS)
_INSTALL_HINT = "`xjobsd migrate` installs it; `xjobsd run` does too, at start"


def refusal_line(exc: XJobsError) -> str:
    """The one line a refusal is printed as: ``xjobsd: X_CODE: message (hint: ...)``."""
    text = str(exc)
    hint = exc.hint
    if isinstance(exc, SchemaMissing):
        # the server's words (``relation "s.jobs" does not exist``, the statement's line and a
        # caret) say less than the code and cost three lines
        text = text.splitlines()[0]
        hint = hint or _INSTALL_HINT
    return f"xjobsd: {text}" + (f" (hint: {hint})" if hint else "")


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


def export_environment(settings: Settings) -> None:
    """Job bodies read their settings afresh (a backfill's pass, its ``environment``), and a
    daemon's children inherit the variables: a ``--config`` file's environment reaches them so."""
    if settings.environment is not None:
        os.environ[find_setting("environment").env] = settings.environment


def driver_from(settings: Settings, application_name: str = "xjobs-cli", *, installed: bool = True,
                **pool_options: Any) -> "JobDriver":
    """A driver for one command, after one quick connection proves the database answers:
    an operator wants "cannot connect" in seconds, not a pool retrying for half a minute.
    With ``installed`` (every command but those that install it) that connection also reads
    the schema's version, and a schema nothing installed is refused (``X_SCHEMA_MISSING``)
    before the command reads or writes anything: never installed behind the user's back.
    ``pool_options`` override the one-connection pool (``pool_size``, ``statement_timeout_ms``)."""
    if not settings.dsn:
        raise InvalidOption("dsn", "no database configured: pass --dsn or set XJOBS_DATABASE_URL")
    from ..drivers.pg_database import driver_errors
    from ..drivers.pg_install import read_state
    from ..drivers.postgres import PostgresDriver
    driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name=application_name,
                            **{"pool_size": 1, "pool_timeout": 10.0, **pool_options})
    try:
        # DatabaseUnavailable within seconds when nothing answers
        with driver_errors(), driver.connect(connect_timeout=5, autocommit=True) as conn:
            version = read_state(conn, settings.schema).version if installed else None
        if version == 0:
            raise SchemaMissing(f"schema {settings.schema!r} is not installed on this database",
                                hint=_INSTALL_HINT)
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


def found_apps(args: argparse.Namespace, settings: Settings) -> list[str]:
    """The app's modules: ``--app``, else the settings' (``XJOBS_APP``, the file), else the
    Django project the settings name (``XJOBS_DJANGO``), else those of the daemon running
    from this directory, so a command run beside it needs no flag."""
    given = list(getattr(args, "app", None) or ()) or list(settings.apps)
    if not given and settings.django:   # XJOBS_DJANGO: the project sets itself up, then its tasks
        given = ["xjobs.contrib.django.worker"]
    return given or daemon_apps(args)


def daemon_apps(args: argparse.Namespace) -> list[str]:
    """The modules the daemon running from this directory imported: from its record
    (``./.xjobs/daemon.json``), else from what its control socket answers if it runs from
    here; none when no daemon answers (a missing socket costs nothing, a hung daemon two
    seconds)."""
    from ..control_client import ControlUnavailable, request
    from .embedded import recorded_daemon
    info = recorded_daemon()
    apps = info.get("apps") if info is not None else None
    if _modules(apps):
        return list(apps)
    path = getattr(args, "control", None) or os.environ.get("XJOBS_CONTROL") or client_path()
    if not os.path.exists(path):
        return []
    try:
        answer = request(path, "status", timeout_s=2.0)
    except (ControlUnavailable, OSError):
        return []
    # the default socket is per user, not per directory: only a daemon run from here counts
    if answer.get("cwd") != os.getcwd():
        return []
    apps = answer.get("apps")
    return list(apps) if _modules(apps) else []


def _modules(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and bool(value) and all(isinstance(m, str) and m for m in value)


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
