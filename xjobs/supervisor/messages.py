"""What each pipe message must carry, checked field by field before anything reads it.

``framing`` guarantees a frame is a JSON object with a string ``type``; this module checks the
rest. A message that fails is treated like a broken frame: the channel to that one child is
closed (the child sees EOF, stops and exits, and its slot restarts), and every other child
carries on. Unknown message types and unknown extra fields are allowed (a newer child may say
more); a known field of the wrong type is not, and ``in_flight`` and ``stats`` are checked
in a message of any type, since the supervisor reads them from every message.

Child to parent::

    hello       pid int, identity str, role str, queue str|null, index int
    ready       pid int, stats object
    heartbeat   state str, in_flight int >= 0, stats object
    lease-lost  count int >= 0, total int >= 0
    draining    in_flight int >= 0, deadline_at number
    stopped     stats object, in_flight int >= 0 (optional), error str|null (optional)

Parent to child::

    accept      deadline_at number, reason str (optional), interrupt bool (optional)
    close       deadline_at number, reason str (optional)
    ping        nothing

Inside ``stats`` (the role's record, ``workers/telemetry.py``) ``claimed`` and ``in_flight`` must
be numbers when present; the supervisor reads the rest back into the record class the role's
policy names, which keeps a field's default for a value of another type.
"""

from __future__ import annotations

import math
from typing import Any, Callable

_REQUIRED = object()


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return _int(value) and value >= 0


def _number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _stats(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    return all(_number(value[name]) for name in ("claimed", "in_flight") if name in value)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


# type -> {field: (check, required)}; the common fields are read from a message of any type
_Fields = dict[str, tuple[Callable[[Any], bool], bool]]
_CHILD_COMMON: _Fields = {"in_flight": (_count, False), "stats": (_stats, False)}
_CHILD: dict[str, _Fields] = {
    "hello": {"pid": (_int, True), "identity": (_text, True), "role": (_text, True),
              "queue": (_text_or_none, False), "index": (_int, True)},
    "ready": {"pid": (_int, True), "stats": (_stats, False)},
    "heartbeat": {"state": (_text, True), "in_flight": (_count, True), "stats": (_stats, False)},
    "lease-lost": {"count": (_count, True), "total": (_count, False)},
    "draining": {"in_flight": (_count, False), "deadline_at": (_number, False)},
    "stopped": {"stats": (_stats, False), "in_flight": (_count, False), "error": (_text_or_none, False)},
}
_PARENT: dict[str, _Fields] = {
    "accept": {"deadline_at": (_number, True), "reason": (_text, False), "interrupt": (_flag, False)},
    "close": {"deadline_at": (_number, True), "reason": (_text, False)},
    "ping": {},
}


def _problem(message: dict[str, Any], schema: dict[str, _Fields], common: _Fields) -> str | None:
    fields = {**common, **schema.get(message["type"], {})}
    for name, (check, required) in fields.items():
        if name not in message:
            if required:
                return f"{message['type']!r} message without {name!r}"
            continue
        if not check(message[name]):
            return f"{message['type']!r} message with a bad {name!r}: {message[name]!r:.80}"
    return None


def child_message_problem(message: dict[str, Any]) -> str | None:
    """Why a message from a child cannot be used, or None when it can."""
    return _problem(message, _CHILD, _CHILD_COMMON)


def parent_message_problem(message: dict[str, Any]) -> str | None:
    """Why a message from the supervisor cannot be used, or None when it can."""
    return _problem(message, _PARENT, {})
