"""``xjobsd drain``, ``reload`` and ``scale``: asking the running daemon to change course.

Each is one request over the control socket (``supervisor/control.py`` lists the messages);
the answer is printed in plain words, or as the JSON the daemon sent with ``--json``. A
refusal is said on stderr and exits 2 when it refuses what was typed (``X_INVALID_OPTION``),
1 otherwise, as does a daemon that does not answer.

    xjobsd drain                          the two-phase drain, as SIGTERM
    xjobsd reload                         re-read the configuration and replace children one
                                          group at a time, as SIGHUP
    xjobsd scale QUEUE +N|-N|=N [--allow-zero]
                                          worker processes of a queue ('all': every queue),
                                          1 to 256; 0 only with --allow-zero
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable

import orjson

from ..errors import InvalidOption
from .common import add_control_flags, ask_daemon, refusal_exit_code


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("drain", help="ask the running daemon to drain and exit (like SIGTERM)")
    add_control_flags(p)
    p.set_defaults(handler=drain)
    p = sub.add_parser("reload", help="ask the running daemon to re-read its configuration (like SIGHUP)")
    add_control_flags(p)
    p.set_defaults(handler=reload)
    p = sub.add_parser("scale", help="add or remove worker processes of a queue")
    p.add_argument("queue", help="queue name, or 'all'")
    p.add_argument("change", help="+N, -N or =N processes")
    p.add_argument("--allow-zero", action="store_true",
                   help="allow a queue to be left with no process (it then claims nothing)")
    add_control_flags(p)
    p.set_defaults(handler=scale)


def _print_json(answer: dict) -> None:
    sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")


def _finish(args: argparse.Namespace, answer: dict, words: Callable[[dict], list[str]]) -> int:
    if args.json:
        _print_json(answer)
    if not answer.get("ok"):
        if not args.json:
            print(f"xjobsd: {answer.get('error') or 'refused'}", file=sys.stderr)
        return refusal_exit_code(answer.get("code"))
    if not args.json:
        for line in words(answer):
            print(line)
    return 0


def drain(args: argparse.Namespace) -> int:
    return _finish(args, ask_daemon(args, "drain"),
                   lambda a: [f"{a['state']}; deadline {a['deadline_seconds']:g}s"])


def scale(args: argparse.Namespace) -> int:
    change = args.change.strip()
    queue = None if args.queue == "all" else args.queue
    try:
        if change.startswith("="):
            fields = {"processes": int(change[1:])}
        else:
            fields = {"delta": int(change)}
    except ValueError:
        raise InvalidOption("change", f"expected +N, -N or =N, got {args.change!r}") from None
    if args.allow_zero:
        fields["allow_zero"] = True
    return _finish(args, ask_daemon(args, "scale", queue=queue, **fields), _scale_words)


def _scale_words(answer: dict) -> list[str]:
    before = answer.get("processes_before", {})
    lines = []
    for queue, after in sorted(answer["processes"].items()):
        was = before.get(queue, after)
        lines.append(f"queue {queue}: {after} processes (unchanged)" if was == after
                     else f"queue {queue}: {was} -> {after} processes")
    return lines


def _reload_words(answer: dict) -> list[str]:
    return [f"reloading: replacing {', '.join(answer['groups'])} one group at a time"]


def reload(args: argparse.Namespace) -> int:
    return _finish(args, ask_daemon(args, "reload"), _reload_words)
