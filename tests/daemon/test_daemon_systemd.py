"""The systemd contract: the unit file's promises, and sd_notify spoken by the real daemon."""

from __future__ import annotations

import configparser
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.daemon_fixtures import CLI, ROOT, wait_for
from xjobs.cli import build_parser
from xjobs.options import duration_ms


def unit(name: str = "xjobsd.service") -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[method-assign, assignment]
    parser.read(ROOT / "systemd" / name)
    return parser


def test_the_tick_units_run_one_bounded_pass_a_minute():
    service = unit("xjobsd-tick.service")["Service"]
    assert service["Type"] == "oneshot" and service["SuccessExitStatus"] == "1"
    command = service["ExecStart"].split()
    assert command[:2] == ["/opt/xjobs/venv/bin/xjobsd", "tick"]
    args = build_parser().parse_args(command[1:])       # the flags the unit passes exist
    deadline_s = duration_ms(args.deadline, "deadline") / 1000
    assert int(service["TimeoutStartSec"]) >= deadline_s + 5   # the pass settles before systemd kills it
    for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome"):
        assert hardening in service
    timer = unit("xjobsd-tick.timer")
    assert timer["Timer"]["OnCalendar"] == "*-*-* *:*:00" and timer["Install"]["WantedBy"] == "timers.target"


def test_the_unit_file_matches_the_daemon():
    service = unit()["Service"]
    assert service["Type"] == "notify" and service["NotifyAccess"] == "main"
    assert service["KillMode"] == "mixed" and service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"   # a refused configuration stays down
    assert service["RuntimeDirectory"] == "xjobsd"
    # systemd 252 (Debian 12) has no Type=notify-reload: ExecReload waits for the reload itself,
    # through the control socket the environment file names, and gives up before systemd does
    assert service["ExecReload"] == "/opt/xjobs/venv/bin/xjobsd reload --wait"
    reload_timeout_s = duration_ms(build_parser().parse_args(["reload"]).timeout, "timeout") / 1000
    assert reload_timeout_s < int(service["TimeoutStartSec"])
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
        assert re.search(r"STATUS=running: 3/3 children ready", ready), ready   # worker, scheduler, relay
        assert f"MAINPID={daemon.pid}" in ready
        daemon.ready()
        daemon.signal(signal.SIGTERM)
        saw("STOPPING=1")
        assert daemon.wait(10) == 0
    finally:
        receiver.close()


@pytest.mark.postgres
@pytest.mark.daemon
def test_reload_wait_returns_once_every_group_is_replaced_and_systemd_hears_it(daemon_env):
    env = daemon_env
    path = str(env.tmp / "notify.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(10)
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["alpha=1x8", "beta=1x8"]\n')
    try:
        daemon = env.start("--config", str(config), NOTIFY_SOCKET=path)
        before = {c["pid"] for c in daemon.ready()["children"]}
        config.write_text('[xjobs]\nqueues = ["alpha=2x8", "beta=1x4"]\n')
        # the CLI finds the socket as ExecReload does: XJOBS_CONTROL from the environment
        reload = subprocess.run(CLI + ["reload", "--wait", "--timeout", "30s"], cwd=env.tmp,
                                env={**env.process_env, "XJOBS_CONTROL": daemon.control},
                                capture_output=True, text=True, timeout=60)
        assert reload.returncode == 0, (reload.stdout, reload.stderr)
        lines = reload.stdout.splitlines()
        # alpha only gains a process; beta's slots change size, so its children are replaced
        assert lines[0] == "reloading: replacing worker beta one group at a time", lines
        assert lines[-1].startswith("reload complete after "), lines

        # already true when --wait returned, not eventually
        status = daemon.status()
        assert {k: v for k, v in status["reload"].items() if k != "last"} == {
            "state": "idle", "generation": 1, "replacing": None}
        serving = [c for c in status["children"] if not c["retiring"]]
        assert len(serving) == 5 and all(c["state"] == "ready" for c in serving)   # 3 workers, 2 singletons
        kept = {(c["role"], c["queue"], c["index"]) for c in serving if c["pid"] in before}
        assert kept == {("worker", "alpha", 1), ("scheduler", None, 1), ("outbox-relay", None, 1)}
        assert status["queues"]["alpha"]["processes"] == 2 and status["queues"]["beta"]["concurrency"] == 4

        heard: list[str] = []   # every datagram up to the READY=1 that follows RELOADING=1
        while not (any("RELOADING=1" in m for m in heard) and "READY=1" in heard[-1]):
            heard.append(receiver.recv(4096).decode())
        reloading = dict(line.split("=", 1) for line in
                         next(m for m in heard if "RELOADING=1" in m).splitlines())
        assert int(reloading["MONOTONIC_USEC"]) > 0
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
    finally:
        receiver.close()


@pytest.mark.postgres
@pytest.mark.daemon
def test_reload_wait_gives_up_after_its_timeout_and_says_what_it_waits_for(daemon_env):
    env = daemon_env
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["alpha=1x8"]\n')
    daemon = env.start("--config", str(config))
    daemon.ready()
    config.write_text('[xjobs]\nqueues = ["alpha=1x4"]\n')   # its children are replaced
    reload = subprocess.run(CLI + ["reload", "--wait", "--timeout", "1ms", "--control", daemon.control],
                            cwd=env.tmp, env=env.process_env, capture_output=True, text=True, timeout=60)
    assert reload.returncode == 1, (reload.stdout, reload.stderr)
    # the validation of the app on disk alone takes longer than that
    assert "not complete after" in reload.stderr and "still validating the app" in reload.stderr
    wait_for(lambda: daemon.status()["reload"]["state"] == "idle", 20, "the reload to complete anyway")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
