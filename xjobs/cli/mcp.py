"""``xjobsd mcp``: the fleet as Model Context Protocol tools, over stdin and stdout.

    xjobsd mcp [--app myapp.jobs] [--dsn URL] [--control PATH] [--allow-writes]

An MCP client (an assistant, an IDE, an agent) starts it as a subprocess and calls its tools:
status, queues_list, jobs_list, jobs_show, jobs_dead, jobs_stats and tasks_list, each
answering the JSON the matching ``xjobsd ... --json`` prints. ``--allow-writes`` adds
jobs_cancel, jobs_retry, queues_pause and queues_resume (one job or one queue each; the
job's history says ``mcp:USER`` asked); without it they are refused (``X_READ_ONLY``).

The database is opened at the first tool that reads it, so ``status`` works with none
configured and a database that is down comes back as a tool error, not as a server that
would not start. ``--app`` names the app's queues and cron tasks (default: ``XJOBS_APP``,
else the app of the daemon running from this directory). Needs the ``mcp`` extra:
``pip install 'xjobsd[mcp]'``; without it the command is refused (``X_EXTRA_MISSING``).
Logs go to stderr: stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import sys

from ..logs import configure_logging
from ..registry import REGISTRY
from .common import (add_database_flags, add_log_flags, client_path, driver_from, found_apps, import_apps,
                     settings_from)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mcp", help="serve the fleet as MCP tools over stdio (for assistants and agents)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--app", action="append", default=[],
                   help="module declaring the app's queues and cron tasks (repeatable; default: XJOBS_APP, "
                        "else the app of the daemon running from this directory)")
    p.add_argument("--control", metavar="PATH",
                   help="the daemon's control socket, for the status tool (default: XJOBS_CONTROL, else "
                        "the one `xjobsd status` finds)")
    p.add_argument("--allow-writes", action="store_true",
                   help="also offer jobs_cancel, jobs_retry, queues_pause and queues_resume")
    add_database_flags(p)
    add_log_flags(p)
    p.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    from ..mcp import server        # X_EXTRA_MISSING here, before anything is read
    from ..mcp.tools import Reach, Tools
    settings = settings_from(args)
    apps = found_apps(args, settings)
    if apps:
        # stdout is the protocol's: whatever the app prints as it is imported goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            import_apps(apps)
    reach = Reach(open_driver=lambda: driver_from(settings, "xjobs-mcp"),
                  control=args.control or os.environ.get("XJOBS_CONTROL") or client_path(),
                  declared=tuple(REGISTRY.queues()) if apps else None,
                  tasks=tuple(REGISTRY.tasks()) if apps else None,
                  by=f"mcp:{getpass.getuser()}")
    try:
        server.serve(Tools(reach), allow_writes=args.allow_writes)
    finally:
        reach.close()
    return 0
