"""The arbiter in this process, forking real children that host a database-free role.

Each test drives ``step()`` by hand until a condition holds (with a deadline), sends real
signals to this process and SIGKILLs real children. Timings are shortened through
``ArbiterOptions`` and ``Settings``; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace
import socket
import time

import pytest

from tests.supervisor.fake_roles import maker
from tests.supervisor.harness import FAST, SETTINGS, all_ready, drive, rows, spec
from xjobs.config import Settings
from xjobs.supervisor import report
from xjobs.supervisor.arbiter import ArbiterOptions
from xjobs.errors import InvalidOption
from xjobs.supervisor.draining import REPEAT_WINDOW_S
from xjobs.supervisor.notify import Notifier
from xjobs.supervisor.slots import RoleGauge, RoleSpec
from xjobs.supervisor.tally import Restarts
from xjobs.workers.queue_worker import QueueWorker


def test_children_start_report_and_drain_cleanly(make_arbiter):
    arbiter = make_arbiter([spec("a", 2, "work"), spec("b", 1)])
    drive(arbiter, lambda: all_ready(arbiter), what="three ready children")
    pids = [c["pid"] for c in rows(arbiter)]
    assert len(set(pids)) == 3
    drive(arbiter, lambda: all(c["completed"] > 0 for c in rows(arbiter, "a")), what="counters to arrive")
    arbiter.begin_drain("test")
    drive(arbiter, lambda: arbiter.state == "stopped", what="the drain to finish")
    assert {q for _, q in arbiter.probe.released} == {"a", "b"}   # every worker's jobs are handed back
    assert set(arbiter.probe.counted.values()) == {False}   # retired, not crashed: no attempt spent
    assert all(c.restarts == 0 for c in arbiter.processes.slots)


def test_a_killed_child_is_restarted_with_a_fresh_identity(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "work")])
    drive(arbiter, lambda: all_ready(arbiter))
    first = rows(arbiter)[0]
    drive(arbiter, lambda: rows(arbiter)[0]["completed"] > 3)
    before = rows(arbiter)[0]["completed"]
    os.kill(first["pid"], signal.SIGKILL)
    drive(arbiter, lambda: rows(arbiter)[0]["pid"] not in (None, first["pid"])
          and rows(arbiter)[0]["state"] == "ready", what="the restart")
    second = rows(arbiter)[0]
    assert second["identity"] != first["identity"] and second["restarts"] == 1
    assert "SIGKILL" in second["last_exit"]
    assert arbiter.probe.released[0] == (first["identity"], "q")
    assert arbiter.probe.counted[first["identity"]] is True   # a crash: the attempt counts
    drive(arbiter, lambda: rows(arbiter)[0]["completed"] > before, what="counting to go on")
    assert arbiter.tally.get(Restarts("worker")) == 1


def test_a_crash_loop_is_visible_and_keeps_retrying(make_arbiter):
    arbiter = make_arbiter([spec("bad", 1, "fail")])
    drive(arbiter, lambda: arbiter.processes.slots[0].crash_loop, what="a crash loop")
    row = rows(arbiter)[0]
    assert row["crash_loop"] and row["restarts"] >= 3
    assert "initialize failed" in (row["last_exit"] or "")
    restarts = row["restarts"]
    drive(arbiter, lambda: rows(arbiter)[0]["restarts"] > restarts, what="another attempt")
    assert report.loop_healthy(arbiter)   # reported, not fatal: the watchdog keeps flowing
    assert report.snapshot(arbiter, time.monotonic()).crash_loop == {("worker", "bad"): 1}


def test_a_silent_child_is_killed_and_replaced(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "hang")])
    first = drive(arbiter, lambda: [c["pid"] for c in rows(arbiter) if c["pid"]], what="a child")[0]
    drive(arbiter, lambda: arbiter.processes.slots[0].restarts >= 1, timeout=8, what="the silent child to be killed")
    assert "silent" in arbiter.processes.slots[0].last_exit
    assert first not in [c["pid"] for c in rows(arbiter)]
    # silence is the child's own failing (a body holding the GIL, a deadlock): a crash
    assert list(arbiter.probe.counted.values())[0] is True


def test_ttin_and_ttou_scale_every_worker_queue_but_never_below_one(make_arbiter):
    arbiter = make_arbiter([spec("a", 1), spec("b", 2)])
    drive(arbiter, lambda: all_ready(arbiter))
    os.kill(os.getpid(), signal.SIGTTIN)
    drive(arbiter, lambda: len(rows(arbiter, "a")) == 2 and len(rows(arbiter, "b")) == 3 and all_ready(arbiter))
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGTTOU)
    drive(arbiter, lambda: len([c for c in rows(arbiter) if c["state"] == "ready"]) == 2
          and not arbiter.processes.retired, what="one process per queue")
    assert [s.index for s in arbiter.processes.slots] == [1, 1]


@pytest.mark.timing
def test_the_deadline_then_sigkill_ends_a_child_that_does_not_stop(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "deaf")], settings=Settings(drain_deadline_ms=300, lease_ms=1000,
                                                                     heartbeat_ms=200))
    drive(arbiter, lambda: all_ready(arbiter))
    arbiter.begin_drain("test")
    start = time.monotonic()
    kill_at = arbiter.processes.retired[0].kill_at   # read now: the child may exit on its own at the deadline
    drive(arbiter, lambda: time.monotonic() > arbiter.drain.deadline, what="the deadline to pass")
    if arbiter.processes.retired and time.monotonic() < kill_at - 0.1:   # the grace period: the loop sleeps until the kill
        assert arbiter._next_wake() >= 0.05
    drive(arbiter, lambda: arbiter.state == "stopped", what="the drain")
    assert time.monotonic() - start < 0.3 + FAST.kill_grace_s + 1.0


def test_a_second_stop_signal_kills_at_once(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "deaf")], settings=Settings(drain_deadline_ms=60_000))
    drive(arbiter, lambda: all_ready(arbiter))
    identity, pid = rows(arbiter)[0]["identity"], rows(arbiter)[0]["pid"]
    os.kill(os.getpid(), signal.SIGTERM)
    drive(arbiter, lambda: arbiter.state == "draining")
    os.kill(os.getpid(), signal.SIGINT)
    drive(arbiter, lambda: arbiter.state == "stopped", timeout=3, what="the kill")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert arbiter.probe.counted[identity] is False   # killed by the supervisor: attempt given back


def test_reload_replaces_only_the_groups_that_changed(make_arbiter):
    new_specs = [spec("a", 2), spec("b", 1, concurrency=8), spec("c", 1)]
    arbiter = make_arbiter([spec("a", 1), spec("b", 1), spec("d", 1)],
                           configure=lambda: (SETTINGS, new_specs))
    drive(arbiter, lambda: all_ready(arbiter))
    old = {c["queue"]: c["pid"] for c in rows(arbiter)}
    os.kill(os.getpid(), signal.SIGHUP)
    drive(arbiter, lambda: sorted((c["queue"], c["index"]) for c in rows(arbiter) if c["state"] == "ready")
          == [("a", 1), ("a", 2), ("b", 1), ("c", 1)] and not arbiter.processes.retired
          and arbiter.reshaper.state()["state"] == "idle", what="the new configuration")
    now = {(c["queue"], c["index"]): c["pid"] for c in rows(arbiter)}
    assert now[("a", 1)] == old["a"]          # unchanged: the same child, one more beside it
    assert now[("b", 1)] != old["b"]          # its concurrency changed: replaced
    assert arbiter.reloader.last["replaced"] == ["worker b", "worker c", "worker d"]   # d: removed
    assert all(s.restarts == 0 for s in arbiter.processes.slots)


def test_a_reload_is_reloading_until_its_last_group_is_replaced_and_tells_systemd(make_arbiter, tmp_path):
    path = str(tmp_path / "notify")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(5)

    def heard(word: str) -> dict:
        while True:
            lines = receiver.recv(4096).decode().splitlines()
            if f"{word}=1" in lines:
                return dict(line.split("=", 1) for line in lines)
    try:
        specs = [spec("a", 1), spec("b", 1)]
        arbiter = make_arbiter(specs, configure=lambda: (SETTINGS, [spec("a", 1, concurrency=8),
                                                                    spec("b", 1, concurrency=8)]),
                               notifier=Notifier(path))
        drive(arbiter, lambda: all_ready(arbiter) and arbiter._ready_sent)
        heard("READY")
        old = {c["pid"] for c in rows(arbiter)}
        assert arbiter.cmd_status({})["reload"] == {"state": "idle", "generation": 0, "replacing": None,
                                                    "last": None}
        answer = arbiter.reload().answer
        assert answer == {"ok": True, "groups": ["worker a", "worker b"], "unchanged": [], "generation": 1,
                          "changes": ["worker a: 1x4 -> 1x8", "worker b: 1x4 -> 1x8"]}
        assert arbiter.cmd_status({})["reload"]["state"] == "reloading"
        reloading = heard("RELOADING")
        assert int(reloading["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        drive(arbiter, lambda: arbiter.cmd_status({})["reload"]["replacing"] == "worker b",
              what="the second group's turn")
        assert rows(arbiter, "a")[0]["pid"] not in old   # the first group is done before it
        drive(arbiter, lambda: arbiter.reshaper.state()["state"] == "idle", what="the reload to complete")
        assert arbiter.reshaper.state() == {"state": "idle", "generation": 1, "replacing": None}
        assert arbiter.cmd_status({})["reload"]["last"] == {
            "outcome": "replaced", "generation": 1, "replaced": ["worker a", "worker b"],
            "changes": ["worker a: 1x4 -> 1x8", "worker b: 1x4 -> 1x8"]}
        kids = [c for c in rows(arbiter) if c["state"] == "ready" and not c["retiring"]]
        assert len(kids) == 2 and not old & {c["pid"] for c in kids}
        heard("READY")   # systemd leaves its "reloading" state
    finally:
        receiver.close()


def test_a_worker_is_recycled_after_n_jobs_without_a_gap(make_arbiter):
    options = ArbiterOptions(**{**FAST.__dict__, "recycle_jobs": 20})
    arbiter = make_arbiter([spec("q", 1, "work")], options=options)
    first = drive(arbiter, lambda: all_ready(arbiter) and rows(arbiter)[0]["pid"])
    drive(arbiter, lambda: rows(arbiter)[0]["pid"] != first and all_ready(arbiter) and not arbiter.processes.retired,
          what="the recycled child")
    assert arbiter.processes.slots[0].restarts == 0


def test_scale_a_queue_to_zero_and_back_over_the_control_command(make_arbiter):
    arbiter = make_arbiter([spec("a", 1), spec("b", 1)])
    drive(arbiter, lambda: all_ready(arbiter))
    assert arbiter.cmd_scale({"queue": "a", "processes": 0, "allow_zero": True}) == {
        "ok": True, "processes": {"a": 0}, "processes_before": {"a": 1}}
    drive(arbiter, lambda: not rows(arbiter, "a") and not arbiter.processes.retired, what="queue a paused")
    assert arbiter.cmd_status({})["queues"]["a"]["processes"] == 0
    assert arbiter.cmd_scale({"queue": "a", "delta": 2}) == {
        "ok": True, "processes": {"a": 2}, "processes_before": {"a": 0}}
    drive(arbiter, lambda: len([c for c in rows(arbiter, "a") if c["state"] == "ready"]) == 2)
    with pytest.raises(Exception, match="delta"):
        arbiter.cmd_scale({"queue": "a", "delta": 1.5})


@pytest.mark.parametrize("message, option", [
    ({"queue": "a", "delta": -100}, "delta"),                        # clamping made this zero
    ({"queue": "a", "delta": -2}, "delta"),                          # exactly zero, not allowed
    ({"queue": "a", "processes": 0}, "processes"),                   # =0 needs allow_zero
    ({"queue": "a", "delta": -100, "allow_zero": True}, "delta"),    # below zero: never
    ({"queue": "a", "delta": 100_000}, "delta"),                     # clamping made this 256
    ({"queue": "a", "processes": 257}, "processes"),
    ({"queue": None, "delta": -2}, "delta"),                         # 'all': b would reach 0
    ({"queue": "a", "processes": 0, "allow_zero": "yes"}, "allow_zero"),
])
def test_a_scale_out_of_range_is_refused_and_changes_nothing(make_arbiter, message, option):
    arbiter = make_arbiter([spec("a", 2), spec("b", 1)])
    drive(arbiter, lambda: all_ready(arbiter))
    with pytest.raises(InvalidOption) as refused:
        arbiter.cmd_scale(message)
    assert refused.value.option == option
    for _ in range(5):
        arbiter.step(timeout=0.01)
    assert [len(rows(arbiter, q)) for q in ("a", "b")] == [2, 1] and not arbiter.processes.retired
    assert {s.spec.queue: s.spec.processes for s in arbiter.processes.slots} == {"a": 2, "b": 1}


def test_sigttou_never_revives_a_queue_scaled_to_zero(make_arbiter):
    arbiter = make_arbiter([spec("a", 1), spec("b", 2)])
    drive(arbiter, lambda: all_ready(arbiter))
    assert arbiter.scale("a", processes=0, allow_zero=True)["ok"]
    os.kill(os.getpid(), signal.SIGTTOU)
    drive(arbiter, lambda: len(rows(arbiter, "b")) == 1 and not arbiter.processes.retired, what="b down to one")
    assert rows(arbiter, "a") == [] and arbiter.cmd_status({})["queues"]["a"]["processes"] == 0


def test_the_same_stop_signal_twice_within_the_window_counts_once(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "deaf")], settings=Settings(drain_deadline_ms=60_000))
    drive(arbiter, lambda: all_ready(arbiter))
    now = time.monotonic()
    arbiter._stop_signal("SIGTERM", now)
    arbiter._stop_signal("SIGTERM", now + 0.000_05)   # coreutils timeout: the pid, then its group
    assert arbiter.state == "draining" and arbiter.drain.stop_signals == 1
    arbiter._stop_signal("SIGTERM", now + REPEAT_WINDOW_S + 0.1)   # a later one still escalates
    assert arbiter.state == "killing"
    drive(arbiter, lambda: arbiter.state == "stopped", timeout=3, what="the kill")


def test_a_different_stop_signal_within_the_window_still_escalates(make_arbiter):
    arbiter = make_arbiter([spec("q", 1, "deaf")], settings=Settings(drain_deadline_ms=60_000))
    drive(arbiter, lambda: all_ready(arbiter))
    now = time.monotonic()
    arbiter._stop_signal("SIGTERM", now)
    arbiter._stop_signal("SIGINT", now + 0.01)
    assert arbiter.state == "killing"
    drive(arbiter, lambda: arbiter.state == "stopped", timeout=3, what="the kill")


def test_a_failing_reload_keeps_the_running_children(make_arbiter):
    def broken():
        raise ValueError("xjobs.toml: line 3: nonsense")
    arbiter = make_arbiter([spec("a", 1)], configure=broken)
    drive(arbiter, lambda: all_ready(arbiter))
    pid = rows(arbiter)[0]["pid"]
    answer = arbiter.reload().answer
    assert answer["ok"] is False and "nonsense" in answer["error"]
    for _ in range(10):
        arbiter.step(timeout=0.01)
    assert rows(arbiter)[0]["pid"] == pid and arbiter.state == "running"


def test_a_reload_with_nothing_changed_replaces_nothing_and_says_so(make_arbiter):
    arbiter = make_arbiter([spec("a", 1, "busy")], configure=lambda: (SETTINGS, [spec("a", 1, "busy")]))
    drive(arbiter, lambda: all_ready(arbiter))
    pid = rows(arbiter)[0]["pid"]
    answer = arbiter.reload().answer
    assert answer == {"ok": True, "groups": [], "unchanged": ["worker a"], "generation": 1, "changes": []}
    assert arbiter.cmd_status({})["reload"]["state"] == "idle"
    for _ in range(20):
        arbiter.step(timeout=0.01)
    assert rows(arbiter)[0]["pid"] == pid and not arbiter.processes.retired


def test_a_role_gauge_is_in_the_snapshot_only_while_a_child_of_its_role_reports_it(make_arbiter):
    gauge = RoleGauge("xjobs_fake_claimed", "claimed", "Passes that claimed, in the busiest child.")
    counted = RoleSpec("worker", "a", 2, 4, maker("a", "work"), replace(QueueWorker.policy, gauges=(gauge,)))
    arbiter = make_arbiter([counted, spec("b", 1, "work")])
    drive(arbiter, lambda: all(c["completed"] > 0 for c in rows(arbiter, "a")), what="claims to arrive")
    # stats change only inside step(): the snapshot and the children agree here
    claimed = [c.stats.claimed for s in arbiter.processes.slots if s.spec is counted for c in s.children()]
    gauges = report.snapshot(arbiter, time.monotonic()).role_gauges
    assert gauges == {"xjobs_fake_claimed": (gauge.help, float(max(claimed)))}   # b declares none
    arbiter.begin_drain("test")
    drive(arbiter, lambda: arbiter.state == "stopped", what="the drain to finish")
    assert report.snapshot(arbiter, time.monotonic()).role_gauges == {}   # no child: not exported


def test_the_snapshot_has_no_gauge_for_a_role_that_does_not_run(make_arbiter):
    arbiter = make_arbiter([spec("a", 1, "work")])
    drive(arbiter, lambda: rows(arbiter)[0]["completed"] > 0, what="stats to arrive")
    snap = report.snapshot(arbiter, time.monotonic())
    assert snap.role_gauges == {} and not hasattr(snap, "leader") and not hasattr(snap, "outbox_pending")
