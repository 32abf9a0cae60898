"""The child host loop driven over a real socketpair, with a role that needs no database."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.supervisor.fake_roles import FakeRole
from xjobs.clock import monotonic_ms
from xjobs.supervisor.child import ChildHost, ChildSpec
from xjobs.supervisor.framing import Channel, pair


class Parent:
    """The supervisor's end of the pipe, read with a deadline."""

    def __init__(self, sock) -> None:
        self.channel = Channel(sock)
        self.seen: list[dict] = []

    def expect(self, kind: str, timeout: float = 5.0) -> dict:
        import select
        end = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self.seen):
                if message["type"] == kind:
                    return self.seen.pop(i)
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {kind!r} message within {timeout}s; saw {[m['type'] for m in self.seen]}")
            select.select([self.channel.sock], [], [], left)
            try:
                self.seen.extend(self.channel.receive())
            except EOFError:
                raise AssertionError(f"EOF before {kind!r}; saw {[m['type'] for m in self.seen]}") from None

    def send(self, type: str, **fields) -> None:
        assert self.channel.send({"type": type, **fields})


@pytest.fixture
def host_factory():
    threads = []

    def start(*behavior: str, heartbeat_ms: float = 200.0, before=(), signal_fd=None):
        """``before``: messages the supervisor sent before the child got going (``"EOF"``: it died)."""
        parent_end, child_end = pair()
        role = FakeRole("worker:test:1", "q", behavior)
        spec = ChildSpec(role="worker", queue="q", index=1, identity="worker:test:1",
                         parent_pid=os.getppid(), heartbeat_ms=heartbeat_ms, drain_deadline_ms=5000)
        backstops: list[float] = []
        host = ChildHost(Channel(child_end), role, spec, backstop=backstops.append, signal_fd=signal_fd)
        parent = Parent(parent_end)
        for message in before:
            if message == "EOF":
                parent.channel.close()
            else:
                parent.send(**message)
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("code", host.run()), daemon=True)
        thread.start()
        threads.append(thread)
        return parent, role, host, thread, result, backstops

    yield start
    for thread in threads:
        thread.join(5)


def test_hello_ready_heartbeats_with_stats_and_ping(host_factory):
    parent, role, host, thread, result, _ = host_factory("work")
    hello = parent.expect("hello")
    assert hello["identity"] == "worker:test:1" and hello["pid"] == os.getpid() and hello["queue"] == "q"
    parent.expect("ready")
    first = parent.expect("heartbeat")
    assert first["state"] == "ready" and "claimed" in first["stats"]
    second = parent.expect("heartbeat")
    assert second["stats"]["claimed"] >= first["stats"]["claimed"]
    parent.seen.clear()
    parent.send("ping")
    parent.expect("heartbeat", timeout=1.0)
    parent.send("accept", deadline_at=monotonic_ms() + 2000, reason="test over")
    parent.expect("stopped")
    thread.join(5)
    assert result["code"] == 0


def test_accept_drains_then_closes_once_nothing_is_in_flight(host_factory):
    parent, role, host, thread, result, _ = host_factory("busy")
    parent.expect("ready")
    deadline = monotonic_ms() + 3000
    parent.send("accept", deadline_at=deadline, reason="SIGTERM to the supervisor")
    draining = parent.expect("draining")
    assert draining["deadline_at"] == deadline
    stopped = parent.expect("stopped")
    assert stopped["in_flight"] == 0
    thread.join(5)
    assert result["code"] == 0
    assert ("stop_accepting", "SIGTERM to the supervisor") in role.calls
    assert role.closed_with == deadline
    assert [c[0] for c in role.calls] == ["initialize", "stop_accepting", "close"]


@pytest.mark.timing
def test_work_that_ignores_the_drain_is_abandoned_at_the_deadline(host_factory):
    parent, role, host, thread, result, _ = host_factory("deaf")
    parent.expect("ready")
    sent = time.monotonic()
    parent.send("accept", deadline_at=monotonic_ms() + 300, reason="drain")
    parent.expect("draining")
    stopped = parent.expect("stopped")
    assert 0.25 <= time.monotonic() - sent < 2.0
    assert stopped["in_flight"] == 1
    thread.join(5)
    assert result["code"] == 0


def test_close_goes_to_the_close_phase_at_once(host_factory):
    parent, role, host, thread, result, _ = host_factory("deaf")
    parent.expect("ready")
    parent.send("accept", deadline_at=monotonic_ms() + 60_000, reason="drain")
    parent.expect("draining")
    now = monotonic_ms()
    parent.send("close", deadline_at=now, reason="drain deadline")
    parent.expect("stopped", timeout=2.0)
    thread.join(5)
    assert role.closed_with == now


def test_pipe_eof_means_the_supervisor_is_gone_and_the_child_stops(host_factory):
    parent, role, host, thread, result, backstops = host_factory("busy")
    parent.expect("ready")
    parent.channel.close()
    thread.join(5)
    assert not thread.is_alive()
    assert result["code"] == 0
    assert host.orphaned and backstops, "the exit backstop is armed"
    assert any(c[0] == "stop_accepting" and "supervisor exited" in c[1] for c in role.calls)
    assert role.closed_with is not None


def test_a_role_that_cannot_initialize_says_why_and_exits_1(host_factory):
    parent, role, host, thread, result, _ = host_factory("fail")
    parent.expect("hello")
    stopped = parent.expect("stopped")
    assert "initialize failed" in stopped["error"] and "as asked" in stopped["error"]
    thread.join(5)
    assert result["code"] == 1


def test_a_lost_lease_is_reported_as_it_happens(host_factory):
    parent, role, host, thread, result, _ = host_factory("lose")
    parent.expect("ready")
    lost = parent.expect("lease-lost")
    assert lost["count"] >= 1 and lost["total"] >= lost["count"]
    parent.send("accept", deadline_at=monotonic_ms(), reason="done")
    parent.expect("stopped")
    thread.join(5)


def test_a_drain_sent_before_the_child_was_ready_is_honoured_before_any_claim(host_factory):
    accept = {"type": "accept", "deadline_at": monotonic_ms() + 3000, "reason": "SIGTERM to the supervisor"}
    parent, role, host, thread, result, _ = host_factory("work", before=[accept])
    parent.expect("ready")
    parent.expect("draining")
    parent.expect("stopped")
    thread.join(5)
    assert result["code"] == 0
    assert role.passes == 0 and role.claimed == 0, "claimed a batch after being told to drain"


def test_a_supervisor_gone_before_the_child_was_ready_means_no_claim(host_factory):
    parent, role, host, thread, result, backstops = host_factory("work", before=["EOF"])
    thread.join(5)
    assert result["code"] == 0 and host.orphaned and backstops
    assert role.passes == 0 and role.claimed == 0


def test_a_sigterm_before_the_child_was_ready_means_no_claim(host_factory):
    import signal
    import socket
    r, w = socket.socketpair()
    r.setblocking(False)
    w.send(bytes([signal.SIGTERM]))
    try:
        parent, role, host, thread, result, _ = host_factory("work", signal_fd=r.fileno())
        parent.expect("draining")
        parent.expect("stopped")
        thread.join(5)
        assert role.passes == 0 and ("stop_accepting", "SIGTERM to the child") in role.calls
    finally:
        r.close()
        w.close()


def test_accept_without_interrupt_lets_running_work_go_on_until_a_drain_interrupts(host_factory):
    parent, role, host, thread, result, _ = host_factory("busy")
    parent.expect("ready")
    parent.send("accept", deadline_at=monotonic_ms() + 60_000, reason="recycled", interrupt=False)
    draining = parent.expect("draining")
    assert draining["in_flight"] == 1
    assert ("stop_accepting", "recycled", False) in role.calls
    parent.seen.clear()
    assert parent.expect("heartbeat")["in_flight"] == 1   # still running, not told to stop
    parent.send("accept", deadline_at=monotonic_ms() + 60_000, reason="SIGTERM to the supervisor")
    stopped = parent.expect("stopped")
    assert stopped["in_flight"] == 0
    assert ("stop_accepting", "SIGTERM to the supervisor") in role.calls
    thread.join(5)


def test_a_malformed_message_from_the_supervisor_is_a_broken_pipe(host_factory):
    parent, role, host, thread, result, backstops = host_factory("busy")
    parent.expect("ready")
    parent.send("accept", deadline_at="soon", reason="drain")
    thread.join(5)
    assert not thread.is_alive() and result["code"] == 0
    assert host.orphaned and backstops
