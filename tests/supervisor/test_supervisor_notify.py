"""sd_notify: datagrams on NOTIFY_SOCKET, silent without one."""

from __future__ import annotations

import socket
import time

from xjobs.supervisor.notify import Notifier


def test_messages_reach_the_notify_socket(tmp_path, monkeypatch):
    path = str(tmp_path / "notify")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(2)
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    notifier = Notifier(path)
    assert notifier.enabled and notifier.watchdog_s == 4.0
    notifier.ready("running: 2/2 children ready")
    first = receiver.recv(4096).decode().splitlines()
    assert "READY=1" in first and "STATUS=running: 2/2 children ready" in first
    notifier.stopping("draining")
    assert "STOPPING=1" in receiver.recv(4096).decode()
    notifier.extend_timeout(12.5)
    assert receiver.recv(4096).decode() == "EXTEND_TIMEOUT_USEC=12500000"
    notifier.watchdog()
    assert receiver.recv(4096).decode() == "WATCHDOG=1"
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notifier.reloading("reloading: replacing worker a")
    fields = dict(line.split("=", 1) for line in receiver.recv(4096).decode().splitlines())
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert fields["RELOADING"] == "1" and fields["STATUS"] == "reloading: replacing worker a"
    assert before <= int(fields["MONOTONIC_USEC"]) <= after   # what systemd asks to come with it
    notifier.close()
    receiver.close()


def test_without_a_socket_everything_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.ready("x") is False and notifier.watchdog() is False
