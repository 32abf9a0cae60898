"""``xjobsd tick``: one bounded pass of the app's background work (``xjobs.tick``), for a
systemd timer, a Kubernetes CronJob or a serverless cron.

    xjobsd tick --app myapp.jobs | --django mysite.settings [--deadline 25s] [--wait-for-work 0s]
                [--queue emails ...] [--concurrency 16] [--json] [--no-migrate]

First the schema is checked as ``xjobsd run`` checks it: an older one is upgraded (refused with
``--no-migrate``), a newer one that does not serve this code is refused. Prints one summary:
per job name what its runs came to, every failure with its retry verdict, the cron round, the
outbox rows published and the rows pruned (only the tick holding the scheduler's leader lease
prunes and fires cron: beside a daemon, its leader does). ``--wait-for-work`` keeps the pass
listening that long once it runs out of work, so a job enqueued or staged meanwhile starts
within milliseconds of its commit (never past the deadline).
Exit 0 when nothing failed, 1 when a job failed (it is retried or dead-lettered as its policy
says), 2 for bad usage or a refused schema.
"""

from __future__ import annotations

import argparse

from ..options import duration_ms
from ..registry import REGISTRY
from ..tick import TickSummary, run_tick
from ..logs import configure_logging
from .common import (add_database_flags, add_log_flags, driver_from, export_environment, import_apps, print_json,
                     print_table, settings_from)
from . import setting_flags
from .django_app import with_django


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("tick", help="one bounded pass: due cron, then the queues, until empty or the deadline",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", action="append", default=[], help="module declaring the jobs (repeatable)")
    setting_flags.add(parser, "django")
    parser.add_argument("--deadline", default="25s", help="the pass's budget (default 25s)")
    parser.add_argument("--wait-for-work", default="0s", metavar="DURATION",
                        help="once out of work, stay this long for more (default 0s; within the deadline)")
    parser.add_argument("--queue", action="append", default=[], help="work only this queue (repeatable)")
    parser.add_argument("--concurrency", type=int, default=16, help="bodies at once per queue (16)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_database_flags(parser)
    setting_flags.add(parser, "migrate")
    add_log_flags(parser)
    parser.set_defaults(handler=tick)


def tick(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    deadline_s = duration_ms(args.deadline, "deadline", exclusive_minimum=True, maximum_ms=3_600_000) / 1000.0
    wait_s = duration_ms(args.wait_for_work, "wait-for-work", maximum_ms=3_600_000) / 1000.0
    settings = with_django(args, settings_from(args))
    export_environment(settings)
    # a Django project's modules, and any --app beside them; else --app, else the settings' apps
    apps = [*settings.apps, *args.app] if settings.django else (args.app or list(settings.apps))
    import_apps(list(dict.fromkeys(apps)))
    driver = driver_from(settings, application_name="xjobsd-tick", installed=False)
    try:
        driver.migrate(upgrade=settings.migrate)   # one read when current, as at a daemon's boot
        summary = run_tick(driver=driver, registry=REGISTRY, settings=settings, deadline_s=deadline_s,
                           queues=args.queue or None, concurrency=args.concurrency,
                           wait_for_work_s=wait_s)
    finally:
        driver.close()
    if args.json:
        print_json(summary.as_json())
    else:
        _print(summary)
    return 1 if summary.failed else 0


def _print(summary: TickSummary) -> None:
    ending = "reached its deadline" if summary.reached_deadline else "ran out of work"
    print(f"tick {summary.identity}: {ending} after {summary.elapsed_s:.2f}s of {summary.deadline_s:g}s")
    cron = summary.cron
    if cron.get("leader") is not None:
        print(f"cron: {'led the round' if cron['leader'] else 'another scheduler leads'}, "
              f"{cron.get('dispatched', 0)} occurrence(s) dispatched")
    published = summary.outbox.get("published", 0)
    if published:
        print(f"outbox: {published} staged row(s) published")
    pruned = summary.upkeep.get("pruned")
    if pruned and any(pruned.values()):
        print("pruned: " + ", ".join(f"{n} {table}" for table, n in pruned.items()))
    outcomes = sorted({o for counts in summary.jobs.values() for o in counts})
    if summary.jobs:
        print_table(["job", *outcomes], [[name, *(counts.get(o, 0) for o in outcomes)]
                                         for name, counts in summary.jobs.items()])
    else:
        print("no job was due")
    if summary.abandoned:
        print(f"{summary.abandoned} run(s) ignored the deadline: handed back, attempt not counted")
    for failure in summary.failures:
        print(f"FAILED {failure['name']}#{failure['job_id']} attempt {failure['attempt']}: "
              f"{failure['error']} -- {failure['verdict']}")
