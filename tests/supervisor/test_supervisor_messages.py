"""Field checks on pipe messages: what each type must carry, and what a bad one looks like."""

from __future__ import annotations

import pytest

from xjobs.supervisor.messages import child_message_problem, parent_message_problem

GOOD_CHILD = [
    {"type": "hello", "pid": 12, "identity": "worker:h:1", "role": "worker", "queue": None, "index": 1},
    {"type": "ready", "pid": 12, "stats": {"claimed": 0, "jobs": {}}},
    {"type": "heartbeat", "state": "ready", "in_flight": 3, "stats": {"claimed": 7, "leader": True}},
    {"type": "lease-lost", "count": 1, "total": 4},
    {"type": "draining", "in_flight": 0, "deadline_at": 123.5},
    {"type": "stopped", "stats": {}, "in_flight": 0},
    {"type": "stopped", "error": "initialize failed: x", "stats": {}},
    {"type": "something-newer", "extra": [1, 2]},
]
BAD_CHILD = [
    ({"type": "heartbeat", "state": "ready", "in_flight": "none", "stats": {}}, "in_flight"),
    ({"type": "heartbeat", "state": "ready", "in_flight": -1}, "in_flight"),
    ({"type": "heartbeat", "state": "ready", "in_flight": True}, "in_flight"),
    ({"type": "heartbeat", "state": "ready"}, "in_flight"),
    ({"type": "heartbeat", "state": "ready", "in_flight": 1, "stats": []}, "stats"),
    ({"type": "heartbeat", "state": "ready", "in_flight": 1, "stats": {"claimed": "7"}}, "stats"),
    ({"type": "ready", "pid": "12"}, "pid"),
    ({"type": "hello", "pid": 1, "identity": 5, "role": "worker", "index": 1}, "identity"),
    ({"type": "lease-lost", "count": 1.5}, "count"),
    ({"type": "stopped", "error": {"no": 1}}, "error"),
    ({"type": "something-newer", "in_flight": "x"}, "in_flight"),   # read from any message
]


@pytest.mark.parametrize("message", GOOD_CHILD)
def test_well_formed_child_messages_pass(message):
    assert child_message_problem(message) is None


@pytest.mark.parametrize("message,field", BAD_CHILD)
def test_a_bad_field_is_named(message, field):
    problem = child_message_problem(message)
    assert problem is not None and repr(field) in problem and repr(message["type"]) in problem


def test_parent_messages():
    assert parent_message_problem({"type": "accept", "deadline_at": 1.0, "reason": "x", "interrupt": False}) is None
    assert parent_message_problem({"type": "close", "deadline_at": 1}) is None
    assert parent_message_problem({"type": "ping"}) is None
    assert "deadline_at" in parent_message_problem({"type": "accept", "deadline_at": "soon"})  # type: ignore[operator]
    assert "deadline_at" in parent_message_problem({"type": "close"})  # type: ignore[operator]
    assert "interrupt" in parent_message_problem({"type": "accept", "deadline_at": 1.0, "interrupt": "no"})  # type: ignore[operator]
    assert "reason" in parent_message_problem({"type": "accept", "deadline_at": 1.0, "reason": 3})  # type: ignore[operator]
