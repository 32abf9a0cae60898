"""``xjobsd backfill ls|run``: the app's backfills, declared against what the ledger says ran.

    xjobsd backfill ls [--json]              every backfill: pending, running, completed, excluded
    xjobsd backfill run NAME [--force]       gate it, then enqueue one pass
    xjobsd backfill run --all                gate and enqueue every pending backfill, each alone

The backfills are those the app declares (``--app``, else ``XJOBS_APP``, else the app of the
daemon running from this directory). ``run`` passes each through the gate, in the order an
operator can act in: the environment (``XJOBS_ENVIRONMENT`` against ``environments``), the
precondition (``requires``, e.g. a migration), whether it already ran (only a completed run
blocks; ``--force`` runs a new pass). A refusal is one coded line and does not stop ``--all``
from going on; the exit code is 2 when any name was refused, else 0. A pass already live is
not enqueued twice: the answer names the live job.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from ..drivers.ledger import ledger_of
from ..enqueue import enqueue_many
from ..errors import InvalidOption, UnknownJob, XJobsError
from ..factories.backfill import BackfillSpec, declared
from ..factories.backfill_gate import gate
from ..factories.backfill_report import is_pending, report
from ..registry import REGISTRY, JobHandle
from .common import (add_database_flags, driver_from, found_apps, import_apps, print_json, print_table,
                     refusal_line, settings_from)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("backfill", help="the app's backfills: declared against ran, and gated runs",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))
    ls = verbs.add_parser("ls", help="every declared backfill with its status and its runs")
    ls.set_defaults(handler=list_backfills)
    run = verbs.add_parser("run", help="gate a backfill (or every pending one) and enqueue its pass")
    run.add_argument("name", nargs="?", help="the backfill to run")
    run.add_argument("--all", action="store_true", help="every pending backfill, each gated alone")
    run.add_argument("--force", action="store_true",
                     help="run a new pass of a backfill that already completed (the environment and "
                          "requires are still checked)")
    run.set_defaults(handler=run_backfills)
    for verb in (ls, run):
        verb.add_argument("--app", action="append", default=[],
                          help="module declaring the app's backfills (repeatable; default: XJOBS_APP, "
                               "else the app of the daemon running from this directory)")
        verb.add_argument("--json", action="store_true", help="print JSON")
        add_database_flags(verb)


def _import(args: argparse.Namespace) -> Any:
    settings = settings_from(args)
    import_apps(found_apps(args, settings))
    return settings


def list_backfills(args: argparse.Namespace) -> int:
    settings = _import(args)
    driver = driver_from(settings)
    rows = report(REGISTRY, driver, settings.environment)
    if args.json:
        print_json({"environment": settings.environment, "ledger": ledger_of(driver) is not None,
                    "backfills": rows})
        return 0
    if ledger_of(driver) is None:
        print("this driver keeps no backfill ledger: passes run unbooked, nothing is recorded as run")
    print_table(["name", "status", "runs", "last run", "state", "rows", "started", "completed"],
                [[r["name"] + ("" if r["declared"] else " (not declared)"), r["status"], len(r["runs"]),
                  *([r["last"]["job_id"], r["last"]["state"], r["last"]["rows"], r["last"]["started_at"],
                     r["last"]["completed_at"]] if r["last"] else ["", "", "", "", ""])] for r in rows])
    pending = sum(1 for r in rows if is_pending(r["status"]))
    print(f"{pending} pending in environment {settings.environment or '(none set)'}"
          + (": `xjobsd backfill run --all` runs them" if pending else ""))
    return 0


def _one(handle: JobHandle, spec: BackfillSpec, driver: Any, settings: Any, force: bool) -> dict[str, Any]:
    connect = getattr(driver, "connect", None)
    refused: XJobsError | None
    try:
        refused = gate(spec, driver=driver, environment=settings.environment, force=force,
                       connect=None if connect is None else lambda: connect(connect_timeout=5, autocommit=True))
        if refused is None:
            [enqueued] = enqueue_many(handle, [{"force": True} if force else {}], driver=driver,
                                      enqueued_by=f"cli:{getpass.getuser()}")
            return {"name": spec.name, "job_id": enqueued.id, "deduped": enqueued.deduped, "refused": None}
    except XJobsError as exc:      # one name's failure is its own: --all goes on
        refused = exc
    assert refused is not None
    return {"name": spec.name, "job_id": None, "deduped": False,
            "refused": {"code": refused.code, "message": refused.args[0], "line": refusal_line(refused)}}


def run_backfills(args: argparse.Namespace) -> int:
    if (args.name is None) == (not args.all):
        raise InvalidOption("name", "give a backfill's name or --all, not both" if args.all else
                            "give a backfill's name, or --all for every pending one")
    settings = _import(args)
    backfills = {spec.name: (handle, spec) for handle, spec in declared(REGISTRY)}
    driver = driver_from(settings)
    if args.all:
        names = [r["name"] for r in report(REGISTRY, driver, settings.environment)
                 if r["declared"] and is_pending(r["status"])]
    elif args.name in backfills:
        names = [args.name]
    else:
        raise UnknownJob(f"no backfill named {args.name!r} is declared"
                         + (f"; the app declares {', '.join(sorted(backfills))}" if backfills else ""))
    results = [_one(*backfills[name], driver, settings, args.force) for name in names]
    if args.json:
        print_json(results)
    else:
        for result in results:
            if result["refused"] is not None:
                print(result["refused"]["line"], file=sys.stderr)
            elif result["deduped"]:
                print(f"backfill {result['name']}: a pass is already live, job {result['job_id']}")
            else:
                print(f"backfill {result['name']}: enqueued job {result['job_id']}")
        if not results:
            print("no pending backfill")
    return 2 if any(r["refused"] is not None for r in results) else 0
