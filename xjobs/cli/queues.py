"""``xjobsd queues ls|pause|resume``: queue control, fleet-wide, stored in the database.

    xjobsd queues ls [--json]      every queue: paused, depth, oldest ready, live counts, and
                                   the jobs that wait by reason (as /metrics and status count them)
    xjobsd queues pause NAME       no worker on any machine claims from NAME (running jobs finish)
    xjobsd queues resume NAME      claims start again at once (idle workers are woken)

The queues are those the app declares (``--app``, else ``XJOBS_APP``, else the app of the
daemon running from this directory), those with live jobs, and those paused. Pausing or
resuming any other name is refused (``X_QUEUE_UNKNOWN``, naming the known ones) unless
``--force``: a misspelt queue's pause would stop nothing.

A pause takes effect at each worker's next claim (within one poll interval at most); it is a
row in the database, so it holds across restarts and deploys until somebody resumes it.
"""

from __future__ import annotations

import argparse
import getpass

from .. import admin
from ..config import Settings
from ..errors import UnknownQueue
from ..formatting import iso, queue_state, waiting_counts
from ..registry import REGISTRY
from .common import (add_database_flags, driver_from, found_apps, import_apps, print_json, print_table,
                     settings_from)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("queues", help="list, pause and resume queues, fleet-wide",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))
    ls = verbs.add_parser("ls", help="every queue with its state and depth")
    ls.set_defaults(handler=list_queues)
    pause = verbs.add_parser("pause", help="stop every worker claiming from a queue")
    pause.set_defaults(handler=lambda args: _switch(args, paused=True))
    resume = verbs.add_parser("resume", help="let workers claim from a paused queue again")
    resume.set_defaults(handler=lambda args: _switch(args, paused=False))
    for switch in (pause, resume):
        switch.add_argument("name", help="the queue")
        switch.add_argument("--force", action="store_true",
                            help="act on a queue the app does not declare and that holds no job and no pause")
    for verb in (ls, pause, resume):
        verb.add_argument("--app", action="append", default=[],
                          help="module declaring the app's queues (repeatable; default: XJOBS_APP, "
                               "else the app of the daemon running from this directory)")
        verb.add_argument("--json", action="store_true", help="print JSON")
        add_database_flags(verb)


def _declared(args: argparse.Namespace, settings: Settings) -> tuple[str, ...] | None:
    """The queues the app declares; None when no app was given, configured or found."""
    apps = found_apps(args, settings)
    if not apps:
        return None
    import_apps(apps)
    return tuple(REGISTRY.queues())


def list_queues(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    declared = _declared(args, settings)
    rows = admin.queues(driver_from(settings), declared or ())
    if args.json:
        print_json(rows)
        return 0
    print_table(["queue", "state", "depth", "oldest ready", "running", "suspended", "dead", "quarantined",
                 "waiting"],
                [[r["name"], queue_state(r["paused"], r["paused_by"]), r["depth"],
                  f"{r['oldest_ready_seconds']:.1f}s", r["running"], r["suspended"], r["dead"],
                  r["quarantined"], waiting_counts(r["waiting"])] for r in rows])
    return 0


def _switch(args: argparse.Namespace, *, paused: bool) -> int:
    settings = settings_from(args)
    declared = _declared(args, settings)
    driver = driver_from(settings)
    if not args.force:
        try:
            admin.check_queue(driver, args.name, declared)
        except UnknownQueue as exc:
            exc.hint = f"{exc.hint}; --force {'pauses' if paused else 'resumes'} it anyway"
            raise
    by = f"cli:{getpass.getuser()}"
    (admin.pause_queue if paused else admin.resume_queue)(driver, args.name, by=by)
    row = admin.queue_row(driver, args.name)
    if args.json:
        print_json(row)
    elif paused:
        print(f"queue {args.name} paused fleet-wide by {by}: no worker claims from it; "
              f"running jobs finish ({row['depth']} ready, {row['running']} running)")
    else:
        print(f"queue {args.name} resumed at {iso(row['changed_at'])}: workers claim from it again "
              f"({row['depth']} ready)")
    return 0
