"""``xjobsd tasks ls``: every cron task the app declares, with its next fire time, its
watermark (occurrences up to it are dispatched) and the fleet's scheduler leader.

    xjobsd tasks ls [--app myapp.jobs] [--json]

The app is ``--app``, else ``XJOBS_APP`` (or the file's ``apps``), else the app of the daemon
running from this directory; with none of them the command is refused, never an empty table.

Read from the database; the next fire time is computed from the watermark (or, for a task
never dispatched, from the database's now) with the same resolver the scheduler uses.
"""

from __future__ import annotations

import argparse

from .. import admin
from ..errors import InvalidOption
from ..registry import REGISTRY
from .common import (add_database_flags, driver_from, found_apps, import_apps, print_json, print_table,
                     settings_from)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("tasks", help="cron tasks: next fire, watermark, leader",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))
    ls = verbs.add_parser("ls", help="every cron task of the app")
    ls.add_argument("--app", action="append", default=[],
                    help="module declaring the tasks (repeatable; default: XJOBS_APP, else the app of "
                         "the daemon running from this directory)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    add_database_flags(ls)
    ls.set_defaults(handler=list_tasks)


def list_tasks(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    apps = found_apps(args, settings)
    if not apps:
        raise InvalidOption("app", "no app to list the tasks of: none was given, configured or found",
                            hint="pass --app MODULE, set XJOBS_APP, or run this where `xjobsd run` runs")
    import_apps(apps)
    answer = admin.tasks_json(driver_from(settings), REGISTRY.tasks())   # as /api/schedules answers
    rows, leader = answer["tasks"], answer["leader"]
    if args.json:
        print_json(answer)
        return 0
    print_table(["task", "cron", "tz", "job", "catch up", "next fire", "watermark", "dispatched"],
                [[r["name"], r["cron"], r["tz"], r["job"], r["catch_up"], r["next_fire_local"],
                  r["watermark"] or "-", r["dispatched"]] for r in rows])
    if leader is None:
        print("\nleader: none elected yet (no daemon has run a scheduler on this database)")
    else:
        state_word = "leading" if leader["live"] else "lease expired"
        print(f"\nleader: {leader['holder']} ({state_word}; lease until {leader['expires_at']})")
    return 0
