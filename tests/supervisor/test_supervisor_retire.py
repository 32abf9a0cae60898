"""The arbiter deciding how a child goes: interrupted or not, killed or not, counted or not.

Same set-up as every arbiter test (``harness.py``): real forked children hosting a
database-free role, ``step()`` driven by hand until a condition holds, real signals to this
process.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import time

import pytest

from tests.supervisor.harness import FAST, all_ready, drive, rows, spec
from xjobs.config import Settings
from xjobs.supervisor import child as child_module
from xjobs.supervisor import spawn
from xjobs.supervisor.arbiter import ArbiterOptions
from xjobs.supervisor.notify import Notifier


def live(arbiter, pid: int) -> bool:
    return any(c["pid"] == pid for c in rows(arbiter))


@pytest.mark.timing
def test_a_child_silent_for_less_than_a_lease_keeps_its_place(make_arbiter):
    # silence_s is 1 s, the lease 3 s: a child that says nothing for 2.5 s still holds valid
    # leases (a slow database, say) and must not be killed and restarted under them
    settings = Settings(drain_deadline_ms=2000, lease_ms=3000, heartbeat_ms=500)
    arbiter = make_arbiter([spec("q", 1, "hang")], settings=settings)
    drive(arbiter, lambda: all_ready(arbiter), what="the child to be ready")
    pid = rows(arbiter)[0]["pid"]
    ready_at = arbiter.processes.slots[0].child.ready_at
    while time.monotonic() < ready_at + 2.5:
        arbiter.step(timeout=0.02)
        assert arbiter.processes.slots[0].restarts == 0 and live(arbiter, pid), "killed inside its lease"
    assert arbiter.processes.silence_window_s() == pytest.approx(3.1)
    drive(arbiter, lambda: arbiter.processes.slots[0].restarts >= 1, timeout=5, what="the kill after a lease")
    assert "silent" in arbiter.processes.slots[0].last_exit


@pytest.mark.timing
def test_scaling_down_stops_claiming_but_lets_running_jobs_finish(make_arbiter):
    arbiter = make_arbiter([spec("a", 2, "busy")], settings=Settings(drain_deadline_ms=30_000))
    drive(arbiter, lambda: all_ready(arbiter))
    assert arbiter.scale("a", processes=1)["ok"]
    retired = arbiter.processes.retired[0]
    drive(arbiter, lambda: retired.state == "draining", what="the retired child to drain")
    # not interrupted: its job is still running (an interrupted one would have stopped at once)
    drive(arbiter, lambda: retired.stats.in_flight == 1 and retired.in_flight == 1,
          what="a heartbeat from the retired child")
    assert retired.exit_code is None and not retired.interrupted
    # a real drain reaches that job: everything stops long before the 30 s deadline
    started = time.monotonic()
    arbiter.begin_drain("test")
    drive(arbiter, lambda: arbiter.state == "stopped", timeout=5, what="the drain")
    assert time.monotonic() - started < 3.0
    assert set(arbiter.probe.counted.values()) == {False}


def test_a_recycle_retires_without_interrupting_and_a_reload_interrupts(make_arbiter):
    options = ArbiterOptions(**{**FAST.__dict__, "recycle_jobs": 20})
    changed = Settings(drain_deadline_ms=30_000, poll_ms=500)   # a knob every child reads
    arbiter = make_arbiter([spec("q", 1, "work", "busy")], options=options,
                           settings=Settings(drain_deadline_ms=30_000),
                           configure=lambda: (changed, [spec("q", 1, "busy")]))
    first = drive(arbiter, lambda: all_ready(arbiter) and rows(arbiter)[0]["pid"])
    recycled = drive(arbiter, lambda: arbiter.processes.retired and arbiter.processes.retired[0], what="a recycle")
    assert recycled.pid == first and recycled.interrupted is False
    drive(arbiter, lambda: recycled.state == "draining" and recycled.in_flight == 1,
          what="the recycled child draining with its job still running")
    # the child the reload replaces is the recycle's successor; held here, since it can be
    # retired and gone from the retired list within one pass (an interrupted job stops at once)
    replaced = arbiter.processes.slots[0].child
    assert replaced is not None and replaced is not recycled
    assert arbiter.reload().answer["groups"] == ["worker q"]
    drive(arbiter, lambda: replaced.retiring is not None, what="the reload's replacement")
    # a reload drains the child it replaced as a drain does: its job is told to stop at once
    assert replaced.interrupted is True
    drive(arbiter, lambda: replaced.exit_code == 0, what="the replaced child to stop its job and exit")
    assert recycled.exit_code is None   # the recycled one still lets its job finish


def test_a_drain_over_the_control_socket_then_sigterm_keeps_draining(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "deaf")], settings=Settings(drain_deadline_ms=60_000))
    drive(arbiter, lambda: all_ready(arbiter))
    pid = rows(arbiter)[0]["pid"]
    assert arbiter.cmd_drain({})["ok"]
    os.kill(os.getpid(), signal.SIGTERM)   # systemctl stop after xjobsd drain: the FIRST stop signal
    drive(arbiter, lambda: arbiter.drain.stop_signals == 1, what="the signal to be handled")
    for _ in range(10):
        arbiter.step(timeout=0.01)
    assert arbiter.state == "draining" and live(arbiter, pid)
    # the second stop signal skips to the kill (a different one: a second SIGTERM this soon
    # would be one stop delivered twice, counted once; test_supervisor_arbiter covers that)
    os.kill(os.getpid(), signal.SIGINT)
    drive(arbiter, lambda: arbiter.state == "stopped", timeout=3, what="the kill")


def test_a_bad_field_closes_that_child_only(make_arbiter):
    arbiter = make_arbiter([spec("odd", 1, "odd"), spec("r", 1, "work")])
    drive(arbiter, lambda: any(c["queue"] == "r" and c["state"] == "ready" for c in rows(arbiter)))
    healthy = rows(arbiter, "r")[0]["pid"]
    drive(arbiter, lambda: arbiter.processes.slots[0].restarts >= 2, what="the odd child to be replaced")
    assert arbiter.state == "running"
    assert rows(arbiter, "r")[0]["pid"] == healthy and rows(arbiter, "r")[0]["state"] == "ready"


def test_a_signal_meant_for_a_new_child_never_reaches_the_supervisor(make_arbiter, monkeypatch):
    real = child_module.set_parent_death_signal

    def signalled_at_birth(signum: int) -> bool:
        if signum == signal.SIGKILL:   # the first thing a child does: the parent's handlers are still in place
            os.kill(os.getpid(), signal.SIGTERM)
        return real(signum)
    monkeypatch.setattr(child_module, "set_parent_death_signal", signalled_at_birth)
    arbiter = make_arbiter([spec("q", 1)])
    # each child drains on its own SIGTERM and exits; the supervisor stays running and restarts it
    drive(arbiter, lambda: arbiter.processes.slots[0].restarts >= 2, what="children ending on their own SIGTERM")
    assert arbiter.state == "running" and arbiter.drain.stop_signals == 0


def test_no_fd_for_a_pipe_backs_off_instead_of_failing(make_arbiter, monkeypatch):
    real = spawn.pair  # type: ignore[attr-defined]
    failures = {"left": 3}

    def short_of_fds():
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real()
    monkeypatch.setattr(spawn, "pair", short_of_fds)
    arbiter = make_arbiter([spec("q", 1)])
    drive(arbiter, lambda: all_ready(arbiter), what="the child once fds are back")
    assert failures["left"] == 0 and arbiter.state == "running"


def test_the_watchdog_keeps_flowing_through_a_crash_loop(make_arbiter, tmp_path):
    path = str(tmp_path / "notify.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.setblocking(False)
    notifier = Notifier(path)
    notifier.watchdog_s = 0.2
    try:
        arbiter = make_arbiter([spec("bad", 1, "fail"), spec("ok", 1)], notifier=notifier)
        drive(arbiter, lambda: arbiter.processes.slots[0].crash_loop, what="a crash loop")

        def watchdog_pings() -> int:
            count = 0
            while True:
                try:
                    count += receiver.recv(4096).count(b"WATCHDOG=1")
                except BlockingIOError:
                    return count
        watchdog_pings()
        seen = [0]

        def pinged() -> bool:
            seen[0] += watchdog_pings()
            return seen[0] >= 3
        drive(arbiter, pinged, what="WATCHDOG=1 during the crash loop")
        assert arbiter.processes.slots[0].crash_loop
    finally:
        receiver.close()
