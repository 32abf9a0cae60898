"""``xjobsd enqueue NAME --input JSON``: enqueue one job through the app's declaration, so the
idempotency key, tenant and retry policy are the same as an enqueue from code."""

from __future__ import annotations

import argparse
import difflib
import getpass

import orjson

from ..enqueue import enqueue_many
from ..errors import InvalidOption, UnknownJob
from ..registry import REGISTRY, JobHandle
from .common import add_database_flags, driver_from, found_apps, import_apps, print_json, settings_from


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("enqueue", help="enqueue one job by name")
    parser.add_argument("name", help="the job's durable name")
    parser.add_argument("--input", required=True, help="the job's input as JSON")
    parser.add_argument("--app", action="append", default=[],
                        help="module declaring the job (repeatable; default: XJOBS_APP, else the app "
                             "of the daemon running from this directory)")
    parser.add_argument("--delay", help="run no sooner than this from now (250ms, 5s, 2m, 1h)")
    parser.add_argument("--priority", type=int, help="lower runs first (default: the job's)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_database_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    apps = found_apps(args, settings)
    import_apps(apps)
    try:
        payload = orjson.loads(args.input)
    except orjson.JSONDecodeError as exc:
        raise InvalidOption("input", f"not valid JSON: {exc}") from None
    handle = _declared(args.name, apps)
    # a schema nothing installed is refused here (X_SCHEMA_MISSING): one enqueue never
    # installs a schema, which may be a misspelt one, behind the user's back
    driver = driver_from(settings)
    from .. import config
    config.configure(settings=settings, driver=driver)
    result = enqueue_many(handle, [payload], delay=args.delay, priority=args.priority,
                          enqueued_by=f"cli:{getpass.getuser()}", driver=driver)[0]
    if args.json:
        print_json({"id": result.id, "deduped": result.deduped, "debounced": result.debounced,
                    "name": handle.name, "queue": handle.queue})
    else:
        note = (" (debounced: the job waiting with this key took this input and starts later)" if result.debounced
                else " (deduped: another job holds this key: a live one, or one completed within "
                "its dedupe window)" if result.deduped else "")
        print(f"{handle.name} #{result.id} on queue {handle.queue!r}{note}")
    return 0


def _declared(name: str, apps: list[str]) -> JobHandle:
    """The job named ``name``, or ``X_JOB_UNKNOWN`` saying where it was looked for."""
    try:
        return REGISTRY.get(name)
    except UnknownJob as exc:
        names = [h.name for h in REGISTRY.jobs()]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if not apps:
            hint = ("no app was given, configured or found: pass --app MODULE, the module declaring "
                    "it; set XJOBS_APP; or run this where `xjobsd run` runs")
        else:
            hint = (f"{', '.join(apps)} declares {', '.join(names) or 'no job'}; pass --app MODULE "
                    "for a job declared elsewhere")
        raise UnknownJob(str(exc.args[0]) + (f" (did you mean {close[0]}?)" if close else ""),
                         hint=hint) from None
