"""``xjobsd jobs ls|show|cancel|retry|dead|stats``: the operator's view, read from the database.

Each verb is one small handler over ``xjobs.admin`` (the same functions every surface uses);
``--json`` prints plain JSON objects with ISO-8601 times.

    xjobsd jobs ls [--queue Q] [--name N] [--state S] [--tenant T] [--since WHEN] [--until WHEN]
                   [--error-contains TEXT] [--limit N] [--before ID] [--follow]
    xjobsd jobs retry ID | --all | FILTERS [--dry-run]     dead or cancelled jobs back to ready
    xjobsd jobs retry ID --from-step NAME    a finished job runs again from that step
    xjobsd jobs cancel ID | --all | FILTERS [--dry-run]    ready, running or suspended jobs

WHEN is an ISO-8601 time (``2026-12-01T10:00Z``) or an age (``15m``, ``2h``: that long ago,
on the database's clock). The time filters read when a job finished, or when it was created
if it has not finished.
A bulk verb needs a filter or ``--all``, so a slip of the keyboard cannot retry every job.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from dataclasses import replace
from typing import Any, Callable

import orjson

from .. import admin
from ..drivers.base import LIVE_STATES, STATES, JobDriver, JobView, ListFilter
from ..errors import InvalidOption
from ..factories.backfill_report import by_job
from ..formatting import iso, plain
from ..views import priority_shown, shown
from .common import (add_database_flags, driver_from, found_apps, import_apps, print_json, print_table,
                     settings_from)

_LIST_COLUMNS = ["id", "name", "queue", "state", "attempt", "tenant", "run_at", "last_error"]
_FOLLOW_EVERY_S = 1.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("jobs", help="inspect and steer jobs",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=type(parser))

    ls = verbs.add_parser("ls", help="list jobs, newest first")
    _filters(ls, STATES)
    ls.add_argument("--limit", type=int, default=50, help="rows to print, newest first (%(default)s)")
    ls.add_argument("--before", type=int, metavar="ID", help="the page before this job id")
    ls.add_argument("--follow", "-f", action="store_true",
                    help="keep printing new matching jobs as they are enqueued (Ctrl-C ends)")
    ls.set_defaults(handler=list_jobs)

    show = verbs.add_parser("show", help="one job with its history and progress")
    show.add_argument("id", type=int, help="the job's id")
    show.add_argument("--app", action="append", default=[],
                      help="module declaring the job (repeatable; default: XJOBS_APP, else the app of the "
                           "daemon running from this directory): what it declares of debounce and snoozes")
    show.set_defaults(handler=show_job)

    cancel = verbs.add_parser("cancel", help="cancel one job, or every live job matching filters")
    cancel.add_argument("id", type=int, nargs="?", help="the job to cancel (or select many with the filters)")
    _filters(cancel, LIVE_STATES)
    _bulk_flags(cancel)
    cancel.add_argument("--with-children", action="store_true", default=True,
                        help="the default, always: a cancelled parent cancels its live children, and theirs")
    cancel.add_argument("--reason", default=None, help="why: kept in the job's last_error as \"cancelled by WHO: REASON\"")
    cancel.set_defaults(handler=cancel_jobs)

    retry = verbs.add_parser("retry", help="put one dead or cancelled job back to ready, or every one matching filters")
    retry.add_argument("id", type=int, nargs="?", help="the job to retry (or select many with the filters)")
    retry.add_argument("--from-step", metavar="NAME",
                       help="re-open this step and every step recorded after it, and run the "
                            "(completed, dead or cancelled) job again from there")
    _filters(retry, admin.REQUEUABLE)
    _bulk_flags(retry)
    retry.set_defaults(handler=retry_jobs)

    dead = verbs.add_parser("dead", help="dead letters, newest first")
    dead.add_argument("--limit", type=int, default=50, help="rows to print, newest first (%(default)s)")
    dead.set_defaults(handler=dead_jobs)

    stats = verbs.add_parser("stats", help="per queue, how many jobs are in each state")
    stats.set_defaults(handler=job_stats)

    for verb in (ls, show, cancel, retry, dead, stats):
        verb.add_argument("--json", action="store_true", help="print JSON")
        add_database_flags(verb)


def _filters(parser: argparse.ArgumentParser, states: tuple[str, ...]) -> None:
    parser.add_argument("--queue", help="only jobs of this queue")
    parser.add_argument("--name", help="only jobs of this job name")
    parser.add_argument("--state", choices=states, help="only jobs in this state")
    parser.add_argument("--tenant", help="only jobs of this tenant")
    parser.add_argument("--since", metavar="WHEN", help="ISO-8601 time or an age like 15m")
    parser.add_argument("--until", metavar="WHEN", help="ISO-8601 time or an age like 15m")
    parser.add_argument("--error-contains", metavar="TEXT", help="case-insensitive text of last_error")
    parser.add_argument("--parent", type=int, metavar="ID", help="only the child jobs of this job")


def _bulk_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="every job in the verb's states (no filter)")
    parser.add_argument("--dry-run", action="store_true", help="count what would change, change nothing")
    parser.add_argument("--batch", type=int, default=admin.DEFAULT_BATCH, help="rows per statement (1000)")


def _where(args: argparse.Namespace, limit: int = 50) -> ListFilter:
    return admin.job_filter(queue=args.queue, name=args.name, state=args.state, tenant=args.tenant,
                            since=args.since, until=args.until, error_contains=args.error_contains,
                            parent=args.parent, limit=limit)


def _has_filter(args: argparse.Namespace) -> bool:
    return any(getattr(args, f) is not None
               for f in ("queue", "name", "state", "tenant", "since", "until", "error_contains", "parent"))


def _driver(args: argparse.Namespace) -> JobDriver:
    return driver_from(settings_from(args))


def _by() -> str:
    return f"cli:{getpass.getuser()}"


def _short(text: str | None, width: int = 60) -> str | None:
    if text is None:
        return None
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def _rows(views: list[JobView]) -> list[list[Any]]:
    return [[v.id, v.name, v.queue, v.state, f"{v.attempt}/{v.max_attempts}", v.tenant,
             iso(v.run_at), _short(v.last_error)] for v in views]


def _print_views(views: list[JobView], as_json: bool, driver: JobDriver) -> None:
    if as_json:
        print_json(admin.jobs_json(driver, views))   # the dashboard's /api/jobs answers the same
        return
    print_table(_LIST_COLUMNS, _rows(views))


def list_jobs(args: argparse.Namespace) -> int:
    if args.limit < 0:
        raise InvalidOption("limit", "must be at least 0")
    driver = _driver(args)
    where = _where(args, args.limit)
    if args.before is not None:
        where = replace(where, before_id=args.before)
    views = driver.job_list(where)
    if not args.follow:
        _print_views(views, args.json, driver)
        return 0
    return _follow(driver, where, list(reversed(views)), args.json)


def _emit(views: list[JobView], as_json: bool) -> None:
    """One line per job: a JSON object (``--json``), or the table's columns."""
    for view, row in zip(views, _rows(views)):
        if as_json:
            sys.stdout.write(orjson.dumps(plain(view)).decode() + "\n")
        else:
            print("  ".join("" if cell is None else str(cell) for cell in row))
    sys.stdout.flush()


def _follow(driver: JobDriver, where: ListFilter, first: list[JobView], as_json: bool) -> int:
    """Print the newest page oldest first, then every new match as it appears, like tail -f."""
    _emit(first, as_json)
    after = max((v.id for v in first), default=0)
    try:
        while True:
            time.sleep(_FOLLOW_EVERY_S)
            fresh = driver.job_list(replace(where, after_id=after, before_id=None, limit=1000))
            if fresh:
                _emit(fresh, as_json)
                after = fresh[-1].id
    except KeyboardInterrupt:
        return 0


def dead_jobs(args: argparse.Namespace) -> int:
    driver = _driver(args)
    _print_views(driver.job_dead(args.limit), args.json, driver)
    return 0


def _print_one(view: JobView, as_json: bool, driver: JobDriver) -> None:
    if as_json:
        print_json(admin.job_json(driver, view))   # the dashboard's /api/jobs/ID answers the same
        return
    backfill, family = by_job(driver).get(view.id), admin.family(driver, view.id)
    data = shown(view)
    history = data.pop("history")
    progress = data.pop("progress")
    steps = data.pop("steps")
    waits = data.pop("waiting_for")
    place = data.pop("key")
    data.pop("waiting")
    data.pop("base_priority")
    data["priority"] = priority_shown(view)
    result = data.pop("result")
    data["payload"] = orjson.dumps(data["payload"]).decode()   # as JSON, the way it was given
    if view.state == "completed":   # null is a result too (a body that returned None)
        data["result"] = _clipped(orjson.dumps(result).decode())
    width = max(len(k) for k in data)
    for key, value in data.items():
        print(f"{key.ljust(width)}  {'' if value is None else value}")
    if backfill is not None:
        print(f"{'backfill'.ljust(width)}  {backfill['state']}, {backfill['rows']} rows swept, started "
              f"{backfill['started_at']}" + (f", finished {backfill['completed_at']}" if backfill["completed_at"] else ""))
    if family and family["parent"] is not None:
        print(f"{'parent'.ljust(width)}  job {family['parent']['id']} (step {family['parent']['step']!r})")
    waiting = admin.job_waiting(driver, view)
    if waiting and view.state == "ready":   # a ready job due later, or held by its rate key
        print(f"{'waiting for'.ljust(width)}  {waiting}")
    if family and family["children"]["total"]:
        kids = family["children"]
        counts = ", ".join(f"{n} {state}" for state, n in kids["counts"].items())
        print(f"{'children'.ljust(width)}  {kids['total']}: {counts} (`xjobsd jobs ls --parent {view.id}` lists them)")
    if progress:
        total = progress.get("total")
        done = f"{progress['done']:g}" + (f"/{total:g}" if total is not None else "")
        note = f"  {progress['note']}" if progress.get("note") else ""
        print(f"{'progress'.ljust(width)}  {done}{note}  (at {progress.get('at')})")   # plain() made it ISO
    if place:
        print(f"{'concurrency key'.ljust(width)}  {place['key']!r}, {place['cap']} at once"
              + (", a dead member keeps its place" if place["hold"] else ""))
    if waiting and view.state != "ready":   # a member waiting for its key or sequence
        print(f"{'waiting'.ljust(width)}  {waiting}")
    if waits:
        what = (f"sleep until {waits['until']}" if waits.get("sleep") else
                f"event {waits['event']!r}" + (f" key {waits['key']!r}" if waits["key"] else "")
                + (f" until {waits['until']}" if waits["until"] else " (no timeout)"))
        print(f"{'waiting for'.ljust(width)}  {what} (step {waits['step']!r})")
    if steps:
        print("\nsteps:")
        print_table(["name", "kind", "state", "attempt", "at", "duration_ms"],
                    [[st["name"], st["kind"], st["state"], st["attempt"],
                      st["finished_at"] or st["started_at"], st["duration_ms"]] for st in steps])
    if history:
        print("\nhistory:")
        print_table(["at", "attempt", "outcome", "by", "error"],
                    [[h["at"], h["attempt"], h["outcome"], h["by"], _short(h["error"], 80)]
                     for h in history])
    for entry in history:   # whole: a traceback is read, not skimmed
        if entry.get("traceback"):
            print(f"\ntraceback of attempt {entry['attempt']} ({entry['outcome']} at {entry['at']}):")
            print(entry["traceback"].rstrip("\n"))


def _clipped(text: str, most: int = 2000) -> str:
    """A long result in a terminal: its start and its size; ``--json`` prints it whole."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters; --json shows all)"


def show_job(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    driver = driver_from(settings)
    view = driver.job_get(args.id)
    # only a ready job's sentence needs its declaration (debounce, max_snoozes): the app is
    # looked for only then, though an --app given is always imported (and refused if wrong)
    apps = list(args.app) or (found_apps(args, settings) if view.state == "ready" else [])
    if apps:
        import_apps(apps)
    _print_one(view, args.json, driver)
    return 0


def _bulk(args: argparse.Namespace, one: Callable[[JobDriver, int], JobView],
          many: Callable[[JobDriver, ListFilter], admin.BulkResult]) -> int:
    """One job by id, or a bulk verb over filters (which need a filter or --all)."""
    if args.id is not None:
        if _has_filter(args) or args.all:
            raise InvalidOption("id", "give a job id or filters, not both")
        if args.dry_run:
            raise InvalidOption("dry-run", "counts what filters would touch; `xjobsd jobs show ID` shows one job")
        _changed(args, lambda driver: one(driver, args.id))
        return 0
    if not _has_filter(args) and not args.all:
        raise InvalidOption("filter", "give a job id, at least one filter, or --all")
    result = many(_driver(args), _where(args))
    if args.json:
        print_json(result)
    else:
        print(result.describe())
    return 0


def _changed(args: argparse.Namespace, verb: Callable[[JobDriver], JobView], how: str | None = None) -> None:
    """One job's verb, said in one line (``job 3: dead -> ready (retried by cli:alice)``);
    ``--json`` prints the job as ``jobs show --json`` does. The state before is read first, for
    the line only: the verb itself decides from the row as it is when it runs."""
    driver = _driver(args)
    before = None if args.json else driver.job_get(args.id).state
    after = verb(driver)
    if args.json:
        print_json(shown(after))
        return
    said = [how] if how else []
    said += [after.history[-1]["error"] or ""] if after.history else []
    if before == "running" and after.state == "cancelled":
        said.append("its worker stops it at its next lease renewal")
    notes = "; ".join(note for note in said if note)
    print(f"job {after.id}: {before} -> {after.state}" + (f" ({notes})" if notes else ""))


def cancel_jobs(args: argparse.Namespace) -> int:
    if args.id is not None and not args.json and not _has_filter(args) and not args.all:
        live = admin.live_children(_driver(args), args.id)
        if live:
            _changed(args, lambda d: admin.cancel_job(d, args.id, by=_by(), reason=args.reason),
                     f"with children: its {live} live child job(s) and their descendants are cancelled too")
            return 0
    return _bulk(args, lambda d, job_id: admin.cancel_job(d, job_id, by=_by(), reason=args.reason),
                 lambda d, where: admin.cancel_jobs(d, where, by=_by(), reason=args.reason,
                                                    dry_run=args.dry_run, batch=args.batch))


def retry_jobs(args: argparse.Namespace) -> int:
    if args.from_step is not None:
        # the step and every later one: a later step's record (a cursor, a counter) was computed
        # from what the re-opened step returned, so keeping it would skip the work it stands for
        if args.id is None or _has_filter(args) or args.all or args.dry_run:
            raise InvalidOption("from-step", "re-opens the steps of ONE job: give its id and no filters")
        _changed(args, lambda driver: driver.step_reopen(args.id, args.from_step),
                 f"from step {args.from_step!r}")
        return 0
    return _bulk(args, lambda d, job_id: admin.retry_job(d, job_id, by=_by()),
                 lambda d, where: admin.retry_jobs(d, where, by=_by(), dry_run=args.dry_run,
                                                   batch=args.batch))


def job_stats(args: argparse.Namespace) -> int:
    stats = _driver(args).job_stats()
    if args.json:
        print_json(stats)
        return 0
    rows = [[queue] + [counts.get(state, 0) for state in STATES] for queue, counts in sorted(stats.items())]
    print_table(["queue", *STATES], rows)
    return 0
