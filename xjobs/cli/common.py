"""What the subcommands share: database and control-socket flags, settings, app import, exit
codes, JSON rendering."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import orjson

from ..config import Settings, load_settings
from ..errors import (AppInvalid, IdempotencyKeyRequired, InvalidOption, PayloadInvalid, PayloadTooLarge,
                      TenantRequired, UnknownJob)

if TYPE_CHECKING:
    from ..drivers.base import JobDriver

_TIME_FIELDS = ("run_at", "created_at", "finished_at", "lease_expires_at", "at", "started_at",
                "wake_at", "until")

# refusals of what the user typed, configured or deployed: exit 2, like argparse's own
USAGE_ERRORS = (InvalidOption, UnknownJob, PayloadInvalid, PayloadTooLarge, TenantRequired,
                IdempotencyKeyRequired, AppInvalid)
_USAGE_CODES = frozenset(cls.code for cls in USAGE_ERRORS)


def refusal_exit_code(code: str | None) -> int:
    """2 when a refusal's code says the input was wrong, else 1: the same split ``main``
    makes for exceptions, for refusals that come back over the control socket as codes."""
    return 2 if code in _USAGE_CODES else 1


def add_database_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", help="PostgreSQL URL (default: XJOBS_DATABASE_URL)")
    parser.add_argument("--schema", help="schema holding the queue tables (default: xjobs)")
    parser.add_argument("--config", help="a TOML file with an [xjobs] table (default: ./xjobs.toml)")


def add_control_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control", metavar="PATH",
                        help="the daemon's control socket (default: XJOBS_CONTROL, else "
                             "$XDG_RUNTIME_DIR/xjobsd.sock or ./.xjobs/xjobsd.sock)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def ask_daemon(args: argparse.Namespace, command: str, **fields: Any) -> dict:
    """One request over the control socket; ``ControlUnavailable`` (exit 1) when none answers."""
    from ..supervisor.control import client_path, request
    path = args.control or os.environ.get("XJOBS_CONTROL") or client_path()
    return request(path, command, **fields)


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    """Flags, environment and file; with no database configured, the embedded one that
    ``xjobsd run`` keeps under ``./.xjobs/`` (the daemon's own record of it, or the server
    started for this command)."""
    settings = load_settings(getattr(args, "config", None), dsn=getattr(args, "dsn", None),
                             schema=getattr(args, "schema", None), **extra)
    if settings.dsn:
        return settings
    from ..supervisor.embedded import local_database
    found = local_database()
    if found is None:
        return settings
    dsn, schema = found
    explicit_schema = getattr(args, "schema", None) or os.environ.get("XJOBS_SCHEMA")
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


def iso(ms: float | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat(timespec="milliseconds")


def plain(value: Any) -> Any:
    """A JobView (or anything holding them) as plain JSON with ISO-8601 times."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        # a payload is the application's data, shown exactly as stored
        return {k: (v if k == "payload" else
                    iso(v) if k in _TIME_FIELDS and isinstance(v, (int, float)) else plain(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


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


def age(seconds: float | None) -> str:
    """A duration as people read it: ``4.2s``, ``3m05s``, ``2h10m``, ``1d03h``."""
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"
