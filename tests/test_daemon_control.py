"""``xjobsd scale``, ``drain`` and ``status`` as an operator types them, against a real daemon:
refusals over the real control socket, exit codes, and plain words instead of Python reprs."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.daemon_fixtures import CLI, daemon_env, wait_for  # noqa: F401 (fixture)
from xjobs.supervisor.control import request

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args) + ["--control", daemon.control], cwd=daemon.env.tmp,
                          env=daemon.env.process_env, capture_output=True, text=True, timeout=30)


def processes(daemon, queue: str) -> int:
    return daemon.status()["queues"][queue]["processes"]


def test_scale_refuses_what_would_empty_or_overfill_a_queue(daemon_env):
    daemon = daemon_env.start("--queue", "alpha=2x4", "--queue", "beta=1x4")
    daemon.ready()

    # over the socket itself: a coded refusal naming the option, and nothing changed
    answer = request(daemon.control, "scale", queue="alpha", delta=-100)
    assert answer["ok"] is False and answer["code"] == "X_INVALID_OPTION", answer
    assert "delta" in answer["error"] and "alpha" in answer["error"]
    assert request(daemon.control, "scale", queue="alpha", delta=100_000)["code"] == "X_INVALID_OPTION"
    assert request(daemon.control, "scale", queue="alpha", processes=257)["code"] == "X_INVALID_OPTION"

    # the CLI: a refusal of what was typed exits 2, like any other bad input
    for change in ("-100", "-2", "+100000", "=0", "=257"):
        refused = cli(daemon, "scale", "alpha", change)
        assert refused.returncode == 2, (change, refused)
        assert refused.stdout == "" and "X_INVALID_OPTION" in refused.stderr, (change, refused)
    assert "--allow-zero" in cli(daemon, "scale", "alpha", "=0").stderr
    as_json = cli(daemon, "scale", "all", "-1", "--json")   # beta would reach zero: all refused
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["code"] == "X_INVALID_OPTION"
    assert (processes(daemon, "alpha"), processes(daemon, "beta")) == (2, 1)

    # zero on purpose, then back: plain words, never a dict's repr
    paused = cli(daemon, "scale", "alpha", "=0", "--allow-zero")
    assert paused.returncode == 0, paused
    assert paused.stdout == "queue alpha: 2 -> 0 processes\n"
    wait_for(lambda: not daemon.children("alpha"), 10, "alpha's processes to go")
    back = cli(daemon, "scale", "alpha", "+1")
    assert (back.returncode, back.stdout) == (0, "queue alpha: 0 -> 1 process\n"), back
    both = cli(daemon, "scale", "all", "+0")
    assert both.stdout.splitlines() == ["queue alpha: 1 process (unchanged)",
                                        "queue beta: 1 process (unchanged)"]
    as_json = json.loads(cli(daemon, "scale", "beta", "+1", "--json").stdout)
    assert as_json == {"ok": True, "processes": {"beta": 2}, "processes_before": {"beta": 1}}
    daemon.ready()

    table = cli(daemon, "status")
    assert table.returncode == 0, table
    assert any(line.startswith("queue figures as of ") and line.endswith("s ago")
               for line in table.stdout.splitlines()), table.stdout

    drained = cli(daemon, "drain")
    assert (drained.returncode, drained.stdout) == (0, "draining; deadline 25s\n"), drained
    assert daemon.wait(15) == 0
    refused = cli(daemon, "drain")   # nobody answers any more
    assert refused.returncode == 1 and "no xjobsd is running" in refused.stderr
