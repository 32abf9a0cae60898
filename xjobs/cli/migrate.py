"""``xjobsd migrate``: install or upgrade the schema (idempotent; also done at boot)."""

from __future__ import annotations

import argparse

from .common import add_database_flags, driver_from, settings_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("migrate", help="install or upgrade the queue schema")
    add_database_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    driver = driver_from(settings, "xjobs-migrate")
    driver.migrate()
    print(f"xjobs: schema {settings.schema!r} is up to date")
    return 0
