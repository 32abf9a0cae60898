"""``xjobsd scale``, ``drain`` and ``status`` as an operator types them, against a real daemon:
refusals over the real control socket, exit codes, and plain words instead of Python reprs."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.daemon_fixtures import CLI, wait_for
from xjobs.control_client import request

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def cli(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args) + ["--control", daemon.control], cwd=daemon.env.tmp,
                          env=daemon.env.process_env, capture_output=True, text=True, timeout=30)


def processes(daemon, queue: str) -> int:
    return daemon.status()["queues"][queue]["processes"]


@pytest.mark.slow
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
    bare = cli(daemon, "scale", "beta", "1")     # a bare number is the count, not one more
    assert (bare.returncode, bare.stdout) == (0, "queue beta: 2 -> 1 process\n"), bare
    assert cli(daemon, "scale", "beta", "two").returncode == 2
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


def test_a_declared_queue_nobody_serves_is_warned_about_and_scale_adds_it(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2")
    daemon.ready()
    assert "no process serves these registered jobs" in daemon.output()
    status = daemon.status()
    assert status["unserved_jobs"]["beta"] == ["touch_beta"]
    assert "no process of this daemon serves queue beta" in cli(daemon, "status").stdout
    [job_id] = env.enqueue("touch_beta", "beta", [{"n": 1}], key=lambda i: f"b:{i['n']}")

    added = cli(daemon, "scale", "beta", "=1", "--concurrency", "3")
    assert added.returncode == 0, added
    assert added.stdout.strip() == "queue beta added: 1 process x 3 slot(s), until the next reload"
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the job of the added queue to run")
    assert "beta" not in daemon.status()["unserved_jobs"]
    assert cli(daemon, "scale", "nope", "=1").returncode == 2          # not declared by the app


def test_reload_says_exactly_what_changed(daemon_env):
    env = daemon_env
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["alpha=1x2"]\n')
    daemon = env.start("--config", str(config))
    daemon.ready()
    config.write_text('[xjobs]\nqueues = ["alpha=2x2", "beta=1x4"]\nlease = "45s"\n')
    answer = cli(daemon, "reload", "--wait")
    assert answer.returncode == 0, answer
    lines = answer.stdout.splitlines()
    assert "  worker alpha: 1x2 -> 2x2" in lines
    assert "  worker beta added: 1x4" in lines
    assert "  lease_ms: 30000.0 -> 45000.0" in lines
    assert lines[-1].startswith("reload complete after")
    wait_for(lambda: len(daemon.children()) == 3 and all(c["state"] == "ready" for c in daemon.children()),
             15, "the reloaded shape")
