"""``xjobsd enqueue NAME --input JSON``: enqueue one job through the app's declaration, so the
idempotency key, tenant and retry policy are the same as an enqueue from code."""

from __future__ import annotations

import argparse
import getpass

import orjson

from ..drivers.base import Enqueued
from ..enqueue import enqueue_many
from ..errors import InvalidOption, SchemaMissing
from ..registry import REGISTRY
from .common import add_database_flags, driver_from, import_apps, print_json, settings_from


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("enqueue", help="enqueue one job by name")
    parser.add_argument("name", help="the job's durable name")
    parser.add_argument("--input", required=True, help="the job's input as JSON")
    parser.add_argument("--app", action="append", default=[], help="module declaring the job (repeatable)")
    parser.add_argument("--delay", help="run no sooner than this from now (250ms, 5s, 2m, 1h)")
    parser.add_argument("--priority", type=int, help="lower runs first (default: the job's)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_database_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    import_apps(args.app or list(settings.apps))
    try:
        payload = orjson.loads(args.input)
    except orjson.JSONDecodeError as exc:
        raise InvalidOption("input", f"not valid JSON: {exc}") from None
    handle = REGISTRY.get(args.name)
    driver = driver_from(settings)
    from .. import config
    config.configure(settings=settings, driver=driver)

    def enqueue() -> Enqueued:
        return enqueue_many(handle, [payload], delay=args.delay, priority=args.priority,
                            enqueued_by=f"cli:{getpass.getuser()}", driver=driver)[0]
    try:
        result = enqueue()
    except SchemaMissing:
        # a database no daemon has started on yet: install the schema, as a daemon's boot
        # would. Only then: an older schema is upgraded by the daemon or `xjobsd migrate`,
        # never as a side effect of one enqueue
        driver.migrate()
        result = enqueue()
    if args.json:
        print_json({"id": result.id, "deduped": result.deduped, "name": handle.name, "queue": handle.queue})
    else:
        note = (" (deduped: another job holds this key: a live one, or one completed within "
                "its dedupe window)" if result.deduped else "")
        print(f"{handle.name} #{result.id} on queue {handle.queue!r}{note}")
    return 0
