"""The systemd contract: the unit file's promises, and sd_notify spoken by the real daemon."""

from __future__ import annotations

import configparser
import re
import signal
import socket
from pathlib import Path

import pytest

from tests.daemon_fixtures import ROOT, daemon_env, wait_for  # noqa: F401 (fixture)
from xjobs.options import duration_ms


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(ROOT / "systemd" / "xjobsd.service")
    return parser


def test_the_unit_file_matches_the_daemon():
    service = unit()["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["KillMode"] == "mixed" and service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"   # a refused configuration stays down
    assert service["RuntimeDirectory"] == "xjobsd"
    assert service["ExecReload"].endswith("-HUP $MAINPID")
    env = dict(line.split("=", 1) for line in (ROOT / "systemd" / "xjobsd.env.example").read_text().splitlines()
               if line and not line.startswith("#"))
    drain_s = duration_ms(env["XJOBS_DRAIN_DEADLINE"], "drain") / 1000
    assert int(service["TimeoutStopSec"]) >= drain_s + 5   # deadline + grace + margin
    assert env["XJOBS_CONTROL"].startswith("/run/xjobsd/")
    for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome"):
        assert hardening in service


@pytest.mark.postgres
@pytest.mark.daemon
def test_the_daemon_says_ready_status_and_stopping(daemon_env):
    path = str(daemon_env.tmp / "notify.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(10)
    try:
        daemon = daemon_env.start("--queue", "alpha=1x2", NOTIFY_SOCKET=path)
        messages: list[str] = []

        def saw(word: str) -> bool:
            while not any(word in m for m in messages):
                messages.append(receiver.recv(4096).decode())
            return True
        saw("READY=1")
        ready = next(m for m in messages if "READY=1" in m)
        assert re.search(r"STATUS=running: 1/1 children ready", ready), ready
        assert f"MAINPID={daemon.pid}" in ready
        daemon.ready()
        daemon.signal(signal.SIGTERM)
        saw("STOPPING=1")
        assert daemon.wait(10) == 0
    finally:
        receiver.close()
