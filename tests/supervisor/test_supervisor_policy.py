"""The supervisor hosts any role through its policy, never its name.

A ``ticker`` (``tests/supervisor/fake_roles.py``: a ``RoleBase`` singleton that counts its passes
and reports a gauge) runs in a real forked child under a real ``Arbiter``, beside a worker
queue, with the set-up of every arbiter test (``harness.py``): ``step()`` driven by hand until a
condition holds, real signals to this process and to the children.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.supervisor.fake_roles import TICKING, Ticker, ticker_spec
from tests.supervisor.harness import SETTINGS, all_ready, drive, rows, spec
from tests.waiting import wait_for
from xjobs.config import QueueSpec, Settings
from xjobs.errors import InvalidOption
from xjobs.supervisor import report
from xjobs.supervisor.roles import RoleKind, kind_specs
from xjobs.workers.queue_worker import QueueWorker
from xjobs.supervisor.slots import RoleSpec
from xjobs.supervisor.tally import Restarts, RoleCounter
from xjobs.workers.host import InProcessHost, Lifecycle, wind_down
from xjobs.workers.role import RolePolicy


def ticker_row(arbiter) -> dict:
    [row] = [r for r in rows(arbiter) if r["role"] == "ticker"]
    return row


def ticker_child(arbiter):
    [slot] = [s for s in arbiter.processes.slots if s.spec.role == "ticker"]
    return slot.child


def test_a_singleton_role_runs_restarts_is_not_scaled_and_drains_by_its_policy(make_arbiter):
    arbiter = make_arbiter([ticker_spec(), spec("q", 1, "work")])
    drive(arbiter, lambda: all_ready(arbiter), what="the ticker and the worker")

    # it starts and reports: its stats, its gauge; no queue, no concurrency, nothing in flight
    row = ticker_row(arbiter)
    assert row["queue"] is None and row["concurrency"] is None and row["in_flight"] == 0
    assert row["identity"].startswith("ticker:")
    drive(arbiter, lambda: ticker_child(arbiter).stats.passes > 3, what="passes to be counted")
    assert arbiter.tally.get(RoleCounter("ticker", "", "passes")) > 3
    assert RoleCounter("ticker", "", "ticking") not in arbiter.tally.totals   # a gauge, not a count
    snap = report.snapshot(arbiter, time.monotonic())
    assert snap.role_gauges == {TICKING.family: (TICKING.help, 1.0)}
    assert snap.queues == ["q"] and set(snap.in_flight) == {"q"}
    assert snap.restarts == {"ticker": 0, "worker": 0}
    assert snap.children[("ticker", "ready")] == 1
    assert set(arbiter.cmd_status({})["queues"]) == {"q"}

    # SIGKILL: restarted, and no hand-back is asked for (it holds no jobs)
    first = row["pid"]
    os.kill(first, signal.SIGKILL)
    drive(arbiter, lambda: ticker_row(arbiter)["pid"] not in (None, first)
          and ticker_row(arbiter)["state"] == "ready", what="the ticker's restart")
    assert ticker_row(arbiter)["restarts"] == 1 and "SIGKILL" in ticker_row(arbiter)["last_exit"]
    assert arbiter.tally.get(Restarts("ticker")) == 1
    assert arbiter.probe.released == []

    # SIGTTIN scales the worker queue, never the singleton
    os.kill(os.getpid(), signal.SIGTTIN)
    drive(arbiter, lambda: len(rows(arbiter, "q")) == 2 and all_ready(arbiter), what="a second worker")
    assert len([r for r in rows(arbiter) if r["role"] == "ticker"]) == 1

    # a drain: the accept phase interrupts (the default policy), then it closes and exits 0
    child = ticker_child(arbiter)
    arbiter.begin_drain("test")
    drive(arbiter, lambda: arbiter.state == "stopped", what="the drain to finish")
    assert child.exit_code == 0 and child.state == "stopped" and child.interrupted
    assert child.stats.phase == "closed" and child.stats.interrupted == "test"
    assert child.identity not in {identity for identity, _ in arbiter.probe.released}
    assert {queue for _, queue in arbiter.probe.released} == {"q"}   # the workers' hand-backs only


def test_a_role_whose_drain_is_finish_is_not_interrupted(make_arbiter):
    arbiter = make_arbiter([ticker_spec(drain="finish")])
    drive(arbiter, lambda: all_ready(arbiter) and ticker_child(arbiter).stats.passes > 0)
    child = ticker_child(arbiter)
    arbiter.begin_drain("test")
    drive(arbiter, lambda: arbiter.state == "stopped", what="the drain to finish")
    assert child.exit_code == 0 and child.interrupted is False
    assert child.stats.phase == "closed" and child.stats.interrupted == ""


def test_a_role_that_is_never_restarted_gives_its_slot_up_until_a_reload(make_arbiter):
    specs = [ticker_spec(restart="never"), spec("q", 1)]
    arbiter = make_arbiter(specs, configure=lambda: (SETTINGS, [ticker_spec(restart="never"), spec("q", 1)]))
    drive(arbiter, lambda: all_ready(arbiter))
    worker = rows(arbiter, "q")[0]["pid"]
    os.kill(ticker_row(arbiter)["pid"], signal.SIGKILL)
    drive(arbiter, lambda: not [r for r in rows(arbiter) if r["role"] == "ticker"], what="the slot given up")
    for _ in range(20):
        arbiter.step(timeout=0.01)
    assert arbiter.state == "running" and not [r for r in rows(arbiter) if r["role"] == "ticker"]
    assert arbiter.tally.get(Restarts("ticker")) == 0 and rows(arbiter, "q")[0]["pid"] == worker
    assert arbiter.reload().answer["ok"]
    drive(arbiter, lambda: [r for r in rows(arbiter) if r["role"] == "ticker" and r["state"] == "ready"]
          and arbiter.reshaper.state()["state"] == "idle", what="the ticker back after a reload")


def test_the_in_process_host_drives_the_same_phases():
    ticker = Ticker("ticker:test:1")
    host = InProcessHost(ticker, drain="finish").start()
    wait_for(lambda: ticker.passes >= 3, 5, "three passes")
    host.stop(deadline_s=1)
    assert ticker.closed and ticker.interrupted is None and host.lifecycle.state == "stopped"


def test_a_pass_that_raises_during_the_drain_still_closes_the_role():
    class FailsWhileDraining(Ticker):
        def run_once(self, now_ms: float) -> float:
            if not self.accepting:
                raise RuntimeError("the database went away mid-drain")
            return super().run_once(now_ms)
    role = FailsWhileDraining("ticker:test:2")
    lifecycle = Lifecycle(role)
    lifecycle.initialize()
    with pytest.raises(RuntimeError, match="mid-drain"):
        wind_down(lifecycle, time.monotonic, time.monotonic() + 5, "test")
    assert role.closed and lifecycle.state == "stopped"


def test_a_policy_and_a_spec_refuse_what_cannot_be_hosted():
    with pytest.raises(InvalidOption):
        RolePolicy(scalable=True)                      # scale counts processes per queue
    with pytest.raises(InvalidOption):
        RolePolicy(drain="later")                      # type: ignore[arg-type]
    with pytest.raises(InvalidOption):
        ticker_spec(per_queue=True)                    # a per-queue role needs a queue
    with pytest.raises(InvalidOption):
        RoleSpec("ticker", None, 2, 1, Ticker, RolePolicy())   # a singleton runs one process
    with pytest.raises(InvalidOption):
        RoleSpec("Ticker Role", None, 1, 1, Ticker, RolePolicy())   # part of every identity


def test_roles_are_listed_once_and_specs_follow_their_policy():
    settings = Settings()
    queues = {"a": QueueSpec(2, 8), "b": QueueSpec(1, 4)}
    [ticker] = kind_specs(RoleKind.of(Ticker), settings, registry=None, queues=queues)  # type: ignore[arg-type]
    assert (ticker.role, ticker.queue, ticker.processes, ticker.policy) == ("ticker", None, 1, Ticker.policy)
    workers = kind_specs(RoleKind.of(QueueWorker), settings, registry=None, queues=queues)  # type: ignore[arg-type]
    assert [(s.queue, s.processes, s.concurrency) for s in workers] == [("a", 2, 8), ("b", 1, 4)]
    assert all(s.policy.hands_back_jobs and s.policy.scalable for s in workers)
