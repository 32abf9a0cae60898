"""``xjobsd jobs ls|show|cancel|retry|dead|stats``: the operator's view, read from the database.

Each verb is one small handler; ``--json`` prints plain JSON objects with ISO-8601 times.
"""

from __future__ import annotations

import argparse
import time

import orjson

from ..drivers.base import STATES, ListFilter
from ..errors import InvalidOption
from .common import (add_database_flags, driver_from, iso, plain, print_json, print_table,
                     settings_from)

_LIST_COLUMNS = ["id", "name", "queue", "state", "attempt", "tenant", "run_at", "last_error"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("jobs", help="inspect and steer jobs")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))

    ls = verbs.add_parser("ls", help="list jobs, newest first")
    ls.add_argument("--queue")
    ls.add_argument("--name")
    ls.add_argument("--state", choices=STATES)
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(handler=list_jobs)

    show = verbs.add_parser("show", help="one job with its history")
    show.add_argument("id", type=int)
    show.set_defaults(handler=show_job)

    cancel = verbs.add_parser("cancel", help="cancel a ready, running or suspended job")
    cancel.add_argument("id", type=int)
    cancel.add_argument("--reason", default=None)
    cancel.set_defaults(handler=cancel_job)

    retry = verbs.add_parser("retry", help="put a dead or cancelled job back to ready")
    retry.add_argument("id", type=int)
    retry.set_defaults(handler=retry_job)

    dead = verbs.add_parser("dead", help="dead letters, newest first")
    dead.add_argument("--limit", type=int, default=50)
    dead.set_defaults(handler=dead_jobs)

    stats = verbs.add_parser("stats", help="per queue, how many jobs are in each state")
    stats.set_defaults(handler=job_stats)

    for verb in (ls, show, cancel, retry, dead, stats):
        verb.add_argument("--json", action="store_true", help="print JSON")
        add_database_flags(verb)


def _driver(args: argparse.Namespace):
    return driver_from(settings_from(args))


def _short(text: str | None, width: int = 60) -> str | None:
    if text is None:
        return None
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_views(views: list, as_json: bool) -> None:
    if as_json:
        print_json(views)
        return
    rows = [[v.id, v.name, v.queue, v.state, f"{v.attempt}/{v.max_attempts}", v.tenant,
             iso(v.run_at), _short(v.last_error)] for v in views]
    print_table(_LIST_COLUMNS, rows)


def list_jobs(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise InvalidOption("limit", "must be at least 0")
    views = _driver(args).job_list(ListFilter(queue=args.queue, name=args.name, state=args.state,
                                              limit=args.limit))
    _print_views(views, args.json)
    return 0


def dead_jobs(args: argparse.Namespace) -> int:
    _print_views(_driver(args).job_dead(args.limit), args.json)
    return 0


def _print_one(view, as_json: bool) -> None:
    if as_json:
        print_json(view)
        return
    data = plain(view)
    history = data.pop("history")
    data["payload"] = orjson.dumps(data["payload"]).decode()   # as JSON, the way it was given
    width = max(len(k) for k in data)
    for key, value in data.items():
        print(f"{key.ljust(width)}  {'' if value is None else value}")
    if history:
        print("\nhistory:")
        print_table(["at", "attempt", "outcome", "error"],
                    [[h["at"], h["attempt"], h["outcome"], _short(h["error"], 80)] for h in history])


def show_job(args: argparse.Namespace) -> int:
    _print_one(_driver(args).job_get(args.id), args.json)
    return 0


def cancel_job(args: argparse.Namespace) -> int:
    reason = args.reason or f"cancelled by an operator at {iso(time.time() * 1000)}"
    _print_one(_driver(args).job_cancel(args.id, reason), args.json)
    return 0


def retry_job(args: argparse.Namespace) -> int:
    _print_one(_driver(args).job_requeue(args.id), args.json)
    return 0


def job_stats(args: argparse.Namespace) -> int:
    stats = _driver(args).job_stats()
    if args.json:
        print_json(stats)
        return 0
    rows = [[queue] + [counts.get(state, 0) for state in STATES] for queue, counts in sorted(stats.items())]
    print_table(["queue", *STATES], rows)
    return 0
