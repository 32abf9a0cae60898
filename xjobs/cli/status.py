"""``xjobsd status``: what the running daemon is doing, over its control socket.

It talks to a running daemon (``--control PATH``; default the same path ``xjobsd run`` uses,
or ``XJOBS_CONTROL``), never to the database. With no daemon answering it says so and exits 1.

    xjobsd status [--json]      children (role, queue, pid, state, uptime, in flight,
                                completed, restarts), queues (depth, oldest ready, and how old
                                those figures are), a reload in progress and what the last
                                one did (or why it was refused)

The verbs that change what the daemon does (drain, reload, scale) are in ``control.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from ..drivers.base import ProgressReport
from ..options import duration_ms
from ..formatting import age, child_state, waiting_counts
from .common import add_control_flags, ask_daemon, print_table, refusal_exit_code

_WAIT_POLL_S = 0.2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("status", help="what the running daemon is doing (over its control socket)")
    p.add_argument("--wait", nargs="?", const="30s", metavar="DURATION",
                   help="wait (default up to 30s) until a daemon answers with every child ready; "
                        "for scripts that start one in the background")
    add_control_flags(p)
    p.set_defaults(handler=status)


def _ready(args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """Ask until the daemon answers running with every child ready, or the time is up (then
    the last answer, or the last ``ControlUnavailable``)."""
    from ..control_client import ControlUnavailable
    end = time.monotonic() + timeout_s
    while True:
        try:
            answer = ask_daemon(args, "status")
            done = _is_ready(answer)
        except ControlUnavailable:
            if time.monotonic() >= end:
                raise
            done, answer = False, {}
        if done or (answer and time.monotonic() >= end):
            return answer
        time.sleep(_WAIT_POLL_S)


def _is_ready(answer: dict[str, Any]) -> bool:
    return answer.get("state") == "running" and all(
        c.get("state") == "ready" for c in answer.get("children", ()))


def status(args: argparse.Namespace) -> int:
    not_ready = False
    if args.wait is not None:
        answer = _ready(args, duration_ms(args.wait, "wait", exclusive_minimum=True) / 1000.0)
        not_ready = not _is_ready(answer)
    else:
        answer = ask_daemon(args, "status")
    if not answer.pop("ok", False):
        print(f"xjobsd: {answer.get('error', 'status refused')}", file=sys.stderr)
        return refusal_exit_code(answer.get("code"))
    if not_ready:
        print(f"xjobsd: not every child is ready after {args.wait}", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 1 if not_ready else 0
    app = f", app {', '.join(answer['apps'])}" if answer.get("apps") else ""
    print(f"xjobsd pid {answer['pid']}: {answer['state']}, up {age(answer['uptime'])}{app}, schema "
          f"{answer['schema']}, database {'up' if answer.get('database_up') else 'DOWN' if answer.get('database_up') is False else '?'}")
    if answer.get("drain_deadline_in") is not None:
        print(f"drain deadline in {answer['drain_deadline_in']:.1f}s")
    reload = answer.get("reload") or {}
    if reload.get("state") == "validating":
        print("reloading: validating the app in a fresh process")
    elif reload.get("state") == "reloading":
        print(f"reloading (generation {reload['generation']}): replacing {reload.get('replacing') or 'children'}")
    if reload.get("last"):
        print(_last_reload(reload["last"]))
    print()
    rows = [[c["role"], c["queue"] or "-", c["index"], c["pid"] or "-",
             child_state(c),
             age(c["uptime"]) if c["pid"] else "-", c["in_flight"], c["completed"], c["restarts"]]
            for c in answer["children"]]
    print_table(["role", "queue", "#", "pid", "state", "uptime", "in flight", "completed", "restarts"], rows)
    print()
    queues = [[name, _dash(q["depth"]), age(q["oldest_ready_seconds"]) if q["oldest_ready_seconds"] is not None else "-",
               q["in_flight"], f"{q['processes']}x{q['concurrency']}", "paused" if q.get("paused") else "",
               q.get("quarantined") or "", q.get("unknown_jobs") or "", waiting_counts(q.get("waiting"))]
              for name, q in answer["queues"].items()]
    print_table(["queue", "depth", "oldest ready", "in flight", "processes", "paused", "quarantined",
                 "unknown jobs", "waiting"], queues)
    print(_figures_age(answer["queues"]))
    for c in answer["children"]:
        if c.get("last_exit"):
            print(f"\n{c['role']} {c['queue'] or ''} #{c['index']}: last exit {c['last_exit']}")
    for queue, names in sorted((answer.get("unserved_jobs") or {}).items()):
        print(f"\nwarning: no process of this daemon serves queue {queue}: jobs {', '.join(names)} "
              f"wait for a daemon that does (xjobsd scale {queue} =1)")
    for c in answer["children"]:   # a per-queue child's figures are its table row; a singleton's, a line
        if c.get("description") is not None and c.get("pid") and c.get("queue") is None:
            print(f"\n{c['role']} #{c['index']}: {c['description']}")
    if answer.get("outbox"):
        print(f"outbox: {answer['outbox']['pending']} row(s) pending, oldest {age(answer['outbox']['oldest_seconds'])}")
    running = [(c, run) for c in answer["children"] for run in c.get("running") or ()]
    if running:
        print()
        print_table(["job", "queue", "attempt", "running for", "alone", "progress"],
                    [[f"{run['name']}#{run['id']}", c["queue"] or "-", run["attempt"], age(run["seconds"]),
                      "yes" if run.get("alone") else "", _progress(run.get("progress"))] for c, run in running])
    return 1 if not_ready else 0


def _progress(report: ProgressReport | None) -> str:
    if not report:
        return ""
    total = f"/{report['total']:g}" if report.get("total") is not None else ""
    return f"{report['done']:g}{total}" + (f" {report['note']}" if report.get("note") else "")


def _figures_age(queues: dict[str, dict[str, Any]]) -> str:
    """Depth and age come from the supervisor's last statistics round, not from this request."""
    ages = [q["as_of_seconds"] for q in queues.values() if q.get("as_of_seconds") is not None]
    if not ages:
        return "queue figures not read from the database yet"
    return f"queue figures as of {age(max(ages))} ago"


def _dash(value: object) -> object:
    return "-" if value is None else value


def _last_reload(last: dict[str, Any]) -> str:
    if last.get("outcome") == "refused":
        return f"last reload refused: {last.get('error')}"
    if last.get("replaced"):
        return f"last reload (generation {last.get('generation')}): replaced {', '.join(last['replaced'])}"
    if last.get("changes"):
        return f"last reload (generation {last.get('generation')}): no child replaced; {'; '.join(last['changes'])}"
    return "last reload: nothing changed, no child replaced"
