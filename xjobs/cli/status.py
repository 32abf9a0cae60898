"""``xjobsd status`` and the other control-socket commands: ``drain``, ``reload``, ``scale``.

They talk to a running daemon over its control socket (``--control PATH``; default the same
path ``xjobsd run`` uses), never to the database. With no daemon answering they say so and
exit 1.

    xjobsd status [--json]      children (role, queue, pid, state, uptime, in flight,
                                completed, restarts) and queues (depth, oldest ready)
    xjobsd drain                the two-phase drain, as SIGTERM
    xjobsd reload               re-read configuration and replace children, as SIGHUP
    xjobsd scale QUEUE +1|-1|=N add or remove worker processes of a queue ('all': every queue)
"""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from ..errors import InvalidOption
from .common import print_table


def _control_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control", metavar="PATH",
                        help="the daemon's control socket (default: XJOBS_CONTROL, else "
                             "$XDG_RUNTIME_DIR/xjobsd.sock or ./.xjobs/xjobsd.sock)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="what the running daemon is doing (over its control socket)")
    _control_flag(p)
    p.set_defaults(handler=status)
    p = sub.add_parser("drain", help="ask the running daemon to drain and exit (like SIGTERM)")
    _control_flag(p)
    p.set_defaults(handler=lambda args: _simple(args, "drain"))
    p = sub.add_parser("reload", help="ask the running daemon to re-read its configuration (like SIGHUP)")
    _control_flag(p)
    p.set_defaults(handler=lambda args: _simple(args, "reload"))
    p = sub.add_parser("scale", help="add or remove worker processes of a queue")
    p.add_argument("queue", help="queue name, or 'all'")
    p.add_argument("change", help="+N, -N or =N processes")
    _control_flag(p)
    p.set_defaults(handler=scale)


def _path(args: argparse.Namespace) -> str:
    from ..supervisor.control import client_path
    return args.control or os.environ.get("XJOBS_CONTROL") or client_path()


def _ask(args: argparse.Namespace, command: str, **fields) -> dict | None:
    from ..supervisor.control import ControlUnavailable, request
    try:
        return request(_path(args), command, **fields)
    except ControlUnavailable as exc:
        print(f"xjobsd: {exc.args[0]}", file=sys.stderr)
        return None


def _finish(args: argparse.Namespace, answer: dict | None) -> int:
    if answer is None:
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif answer.get("ok"):
        print(" ".join(f"{k}={v}" for k, v in answer.items() if k != "ok") or "ok")
    if not answer.get("ok"):
        if not args.json:
            print(f"xjobsd: {answer.get('error', 'refused')}", file=sys.stderr)
        return 1
    return 0


def _simple(args: argparse.Namespace, command: str) -> int:
    return _finish(args, _ask(args, command))


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
    return _finish(args, _ask(args, "scale", queue=queue, **fields))


def status(args: argparse.Namespace) -> int:
    answer = _ask(args, "status")
    if answer is None:
        return 1
    if not answer.pop("ok", False):
        print(f"xjobsd: {answer.get('error', 'status refused')}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(f"xjobsd pid {answer['pid']}: {answer['state']}, up {_age(answer['uptime'])}, schema "
          f"{answer['schema']}, database {'up' if answer.get('database_up') else 'DOWN' if answer.get('database_up') is False else '?'}")
    if answer.get("drain_deadline_in") is not None:
        print(f"drain deadline in {answer['drain_deadline_in']:.1f}s")
    print()
    rows = [[c["role"], c["queue"] or "-", c["index"], c["pid"] or "-",
             c["state"] + (" (crash loop)" if c.get("crash_loop") and c["state"] != "crash-loop" else ""),
             _age(c["uptime"]) if c["pid"] else "-", c["in_flight"], c["completed"], c["restarts"]]
            for c in answer["children"]]
    print_table(["role", "queue", "#", "pid", "state", "uptime", "in flight", "completed", "restarts"], rows)
    print()
    queues = [[name, _dash(q["depth"]), _age(q["oldest_ready_seconds"]) if q["oldest_ready_seconds"] is not None else "-",
               q["in_flight"], f"{q['processes']}x{q['concurrency']}"]
              for name, q in answer["queues"].items()]
    print_table(["queue", "depth", "oldest ready", "in flight", "processes"], queues)
    for c in answer["children"]:
        if c.get("last_exit"):
            print(f"\n{c['role']} {c['queue'] or ''} #{c['index']}: last exit {c['last_exit']}")
    for queue, names in sorted((answer.get("unserved_jobs") or {}).items()):
        print(f"\nwarning: no process of this daemon serves queue {queue}: jobs {', '.join(names)} "
              f"wait for a daemon that does (xjobsd scale {queue} =1)")
    return 0


def _dash(value: object) -> object:
    return "-" if value is None else value


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"
