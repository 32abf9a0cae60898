"""``xjobsd drain``, ``reload`` and ``scale``: asking the running daemon to change course.

Each is one request over the control socket (``supervisor/control.py`` lists the messages);
the answer is printed in plain words, or as the JSON the daemon sent with ``--json``. A
refusal is said on stderr and exits 2 when it refuses what was typed (``X_INVALID_OPTION``),
1 otherwise, as does a daemon that does not answer.

    xjobsd drain                          the two-phase drain, as SIGTERM
    xjobsd reload [--wait [--timeout D]]  re-read the configuration, validate the app on disk
                                          in a fresh process (a refusal exits 2, nothing
                                          changed), then replace the groups that changed one
                                          at a time, as SIGHUP; --wait returns once the last
                                          group's new children are ready
    xjobsd scale QUEUE +N|-N|=N|N [--allow-zero]
                                          worker processes of a queue ('all': every queue),
                                          1 to 256; 0 only with --allow-zero
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import orjson

from ..errors import InvalidOption
from ..options import duration_ms
from ..control_client import ControlUnavailable
from ..supervisor.validate import DEADLINE_S
from .common import add_control_flags, ask_daemon, refusal_exit_code

_POLL_S = 0.2   # how often reload --wait asks for the status: cheap for the daemon, prompt enough
# the daemon answers a reload once a fresh process has imported the app (under DEADLINE_S)
# and, when it changed, the supervisor has imported it again: about as long once more
_RELOAD_ANSWER_S = 2 * DEADLINE_S + 5.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("drain", help="ask the running daemon to drain and exit (like SIGTERM)")
    add_control_flags(p)
    p.set_defaults(handler=drain)
    p = sub.add_parser("reload", help="ask the running daemon to re-read its configuration (like SIGHUP)")
    p.add_argument("--wait", action="store_true",
                   help="return once every group runs the new configuration (for ExecReload=)")
    p.add_argument("--timeout", metavar="DURATION", default="60s",
                   help="with --wait: give up (exit 1) after this long (default 60s)")
    add_control_flags(p)
    p.set_defaults(handler=reload)
    p = sub.add_parser("scale", help="add or remove worker processes of a queue")
    p.add_argument("queue", help="queue name, or 'all'")
    p.add_argument("change", help="+N or -N processes more or fewer; =N or N processes in all")
    p.add_argument("--allow-zero", action="store_true",
                   help="allow a queue to be left with no process (it then claims nothing)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help="slots per process of a queue scale adds (one the app declares and the "
                        "daemon does not serve yet; default 16)")
    add_control_flags(p)
    p.set_defaults(handler=scale)


def _print_json(answer: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")


def _finish(args: argparse.Namespace, answer: dict[str, Any],
            words: Callable[[dict[str, Any]], list[str]]) -> int:
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
        # a signed number changes the count; a bare one sets it, as every other scaler reads it
        if change.startswith(("+", "-")):
            fields = {"delta": int(change)}
        else:
            fields = {"processes": int(change.removeprefix("="))}
    except ValueError:
        raise InvalidOption("change", f"expected +N, -N, =N or N, got {args.change!r}") from None
    if args.allow_zero:
        fields["allow_zero"] = True
    if args.concurrency is not None:
        fields["concurrency"] = args.concurrency
    return _finish(args, ask_daemon(args, "scale", queue=queue, **fields), _scale_words)


def _scale_words(answer: dict[str, Any]) -> list[str]:
    before = answer.get("processes_before", {})
    lines = []
    for queue, after in sorted(answer["processes"].items()):
        was = before.get(queue, after)
        noun = "process" if after == 1 else "processes"
        if queue in answer.get("added", ()):
            lines.append(f"queue {queue} added: {after} {noun} x {answer['concurrency'][queue]} slot(s), "
                         "until the next reload")
            continue
        lines.append(f"queue {queue}: {after} {noun} (unchanged)" if was == after
                     else f"queue {queue}: {was} -> {after} {noun}")
    return lines


def _reload_words(answer: dict[str, Any]) -> list[str]:
    groups, changes = answer.get("groups") or [], answer.get("changes") or []
    if groups:
        head = f"reloading: replacing {', '.join(groups)} one group at a time"
    else:
        head = "reloaded: no child is replaced" if changes else "nothing changed: no child is replaced"
    return [head, *(f"  {change}" for change in changes)]


def reload(args: argparse.Namespace) -> int:
    timeout_s = duration_ms(args.timeout, "timeout", exclusive_minimum=True) / 1000.0
    started = time.monotonic()
    try:   # --timeout bounds the whole of --wait, the validation included (systemd waits as long)
        answer = ask_daemon(args, "reload", timeout_s=min(_RELOAD_ANSWER_S, timeout_s) if args.wait
                            else _RELOAD_ANSWER_S)
    except ControlUnavailable:
        waited = time.monotonic() - started
        if not args.wait or waited < timeout_s:
            raise
        return _gave_up(args, {}, f"the reload is not complete after {waited:.1f}s; still validating "
                                  "the app (see xjobsd status)")
    if not args.wait or not answer.get("ok"):
        return _finish(args, answer, _reload_words)
    if not args.json:
        print("\n".join(_reload_words(answer)), flush=True)
    generation = answer["generation"]
    while True:
        status = ask_daemon(args, "status")
        state = status.get("reload") or {}
        if status.get("state") != "running":
            return _gave_up(args, answer, f"the reload was cut short: the daemon is {status.get('state')}")
        # a newer reload (someone else's) takes over what this one had left: its end is ours
        if state.get("state") == "idle" and state.get("generation", 0) >= generation:
            break
        waited = time.monotonic() - started
        if waited >= timeout_s:
            return _gave_up(args, answer, f"the reload is not complete after {waited:.0f}s; still "
                                          f"replacing {state.get('replacing') or 'children'} "
                                          "(see xjobsd status)")
        time.sleep(_POLL_S)
    waited = time.monotonic() - started
    if args.json:
        _print_json({**answer, "complete": True, "waited_seconds": round(waited, 3)})
    else:
        print(f"reload complete after {waited:.1f}s")
    return 0


def _gave_up(args: argparse.Namespace, answer: dict[str, Any], why: str) -> int:
    if args.json:
        _print_json({**answer, "ok": False, "complete": False, "error": why})
    print(f"xjobsd: {why}", file=sys.stderr)
    return 1
