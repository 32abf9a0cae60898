"""``xjobsd``: one console script, one subcommand module each.

Exit codes: 0 success, 2 bad usage or refused configuration, 1 runtime failure, 141 when the
reader of stdout went away first (``xjobsd status | head -1``).
Every read takes ``--json`` and prints plain JSON objects (times as ISO-8601 strings).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .. import __version__
from ..drivers.sql import SCHEMA_VERSION
from ..errors import XJobsError
from .common import USAGE_ERRORS, refusal_line
from .usage import Parser, parse

# modules under xjobs.cli, each exposing add_parser(subparsers) that registers its
# subcommand(s) with a handler(args) -> exit code; ``control`` registers the verbs that change
# what a running daemon does (drain, reload, scale)
SUBCOMMAND_MODULES = ("run", "status", "control", "migrate", "enqueue", "jobs", "queues", "tasks",
                      "manifest", "tick", "ui", "backfill", "mcp")

# what a shell reports for a process that SIGPIPE ended (128 + 13)
_EXIT_PIPE_CLOSED = 141


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or only the one module ``only`` names."""
    parser = Parser(prog="xjobsd", description="Durable background jobs on PostgreSQL.")
    # the schema this code installs beside the package's version: what a deploy must migrate to
    parser.add_argument("--version", action="version", version=f"xjobsd {__version__} (schema {SCHEMA_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module_name in SUBCOMMAND_MODULES if only is None else (only,):
        module = importlib.import_module(f"{__name__}.{module_name}")
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _dispatch(argv)
        finally:
            # here, not at interpreter exit: a reader that left before the last write is
            # only noticed when the buffer goes out, and then it must land in the except below
            sys.stdout.flush()
    except BrokenPipeError:
        # stdout's reader has gone (``| head -1``): stop quietly. Later writes, and the
        # interpreter's own flush at exit, go to /dev/null instead of printing "Exception
        # ignored". The exit code is 141, what the shell reports for any tool a closed pipe
        # stopped: ``set -o pipefail`` scripts see xjobsd as they see ``cat``, and output cut
        # short never passes for complete.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return _EXIT_PIPE_CLOSED


def _dispatch(argv: list[str] | None) -> int:
    given = sys.argv[1:] if argv is None else argv
    # the daemon imports only its own subcommand: what its supervisor holds when it forks is in
    # every child's memory, and the operator's commands are no part of a worker
    parser = build_parser(only="run" if given[:1] == ["run"] else None)
    try:
        args = parse(parser, given)
        return int(args.handler(args) or 0)
    except USAGE_ERRORS as exc:
        print(refusal_line(exc), file=sys.stderr)
        return 2
    except XJobsError as exc:     # the database's failures among them (DriverError: X_DATABASE_*)
        print(refusal_line(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
