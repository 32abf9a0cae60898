"""``xjobsd migrate``: install or upgrade the schema (idempotent; also done at boot).

    xjobsd migrate [--json]              apply the pending migrations, in order, and say which
    xjobsd migrate --status [--json]     every migration: applied (when, from which file) or pending
    xjobsd migrate --dry-run             the SQL the pending migrations would run; applies nothing

Each migration runs in its own transaction, all of them under one advisory lock, so two
``migrate`` runs at once apply each migration once. Between two consecutive versions a
migration is additive: the workers of the previous release keep running on the new schema
while the fleet is upgraded (each file's header says so: ``compatible-with-previous``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..drivers.sql import SCHEMA_VERSION
from ..errors import InvalidOption
from ..formatting import iso
from .common import add_database_flags, driver_from, print_json, print_table, settings_from

if TYPE_CHECKING:
    from ..drivers.pg_install import MigrationStatus, SchemaState

_LOCK_TIMEOUT_MS = 10_000.0   # the driver's default: what a boot and a plain migrate use


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("migrate", help="install or upgrade the queue schema",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true", help="list applied and pending migrations")
    mode.add_argument("--dry-run", action="store_true",
                      help="print the SQL of the pending migrations without applying it")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON (not with --dry-run)")
    add_database_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.json and args.dry_run:
        raise InvalidOption("json", "--dry-run prints SQL; --json goes with --status or a plain migrate")
    from ..drivers.pg_install import pending_script, read_state, status
    from ..drivers.postgres import PostgresDriver
    settings = settings_from(args)
    driver = driver_from(settings, "xjobsd-migrate", installed=False)
    assert isinstance(driver, PostgresDriver)   # driver_from builds one; the ledger is Postgres's
    try:
        if args.status:
            with driver.connect() as conn:
                state, lines = status(conn, settings.schema)
            _print_status(settings.schema, state, lines, args.json)
            return 0
        if args.dry_run:
            with driver.connect() as conn:
                state, script = pending_script(conn, settings.schema, _LOCK_TIMEOUT_MS)
            _print_dry_run(settings.schema, state, script)
            return 0
        applied = driver.migrate(lock_timeout_ms=_LOCK_TIMEOUT_MS)
        with driver.connect() as conn:
            state = read_state(conn, settings.schema)
    finally:
        driver.close()
    if args.json:
        print_json({"schema": settings.schema, "applied": applied, "version": state.version})
        return 0
    for label in applied:
        print(f"applied {label}")
    if state.version > SCHEMA_VERSION:
        print(f"xjobs: schema {settings.schema!r} is at version {state.version}, newer than this xjobs "
              f"({SCHEMA_VERSION}), and still serves it: nothing to do")
    else:
        print(f"xjobs: schema {settings.schema!r} is up to date (version {state.version})")
    return 0


def _print_status(schema: str, state: SchemaState, lines: list[MigrationStatus], as_json: bool) -> None:
    pending = [line for line in lines if not line.applied]
    if as_json:
        print_json({"schema": schema, "version": state.version, "compatible_from": state.compatible_from,
                    "code_version": SCHEMA_VERSION, "pending": len(pending),
                    "migrations": [{"version": line.version, "name": line.name,
                                    "state": "applied" if line.applied else "pending",
                                    "applied_at": iso(line.applied_at), "checksum": line.checksum,
                                    "file_checksum": line.file_checksum, "edited": line.edited}
                                   for line in lines]})
        return
    if state.version == 0:
        print(f"schema {schema!r}: not installed; this xjobs installs version {SCHEMA_VERSION}")
    else:
        serves = "" if state.compatible_from is None else f", serves the code of version {state.compatible_from} and later"
        print(f"schema {schema!r}: version {state.version}{serves}; this xjobs: version {SCHEMA_VERSION}")
    print_table(["version", "migration", "state", "applied"],
                [[line.version, f"{line.version:04d}_{line.name}", _state(line), _applied(line)]
                 for line in lines])
    if pending:
        print(f"{len(pending)} pending: `xjobsd migrate` applies, `xjobsd migrate --dry-run` prints the SQL")


def _state(line: MigrationStatus) -> str:
    if not line.applied:
        return "pending"
    if line.file_checksum is None:
        return "applied, newer than this xjobs"
    return "applied, file edited since" if line.edited else "applied"


def _applied(line: MigrationStatus) -> str:
    if line.applied_at is not None:
        return iso(line.applied_at) or ""
    return "by an xjobs older than the ledger" if line.applied else ""


def _print_dry_run(schema: str, state: SchemaState, script: str) -> None:
    if not script:
        newer = " (newer than this xjobs)" if state.version > SCHEMA_VERSION else ""
        print(f"-- schema {schema!r} is at version {state.version}{newer}: nothing to run")
        return
    print(f"-- xjobsd migrate --dry-run: schema {schema!r} is at version {state.version}; this is what "
          f"`xjobsd migrate` would run to bring it to {SCHEMA_VERSION}, nothing was applied.\n"
          f"-- It holds one advisory lock across all of it; each migration is its own transaction.\n")
    print(script, end="")
