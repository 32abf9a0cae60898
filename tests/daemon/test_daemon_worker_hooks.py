"""``on_worker_start``/``on_worker_stop`` through ``xjobsd run``: the client a start hook
builds is the worker child's own and the bodies use it, the stop hook runs at the drain, and a
start hook that raises stops its child with X_WORKER_START_FAILED, restarted with the
crash-loop back-off (status and metrics say so) while the rest of the daemon goes on; a tick
runs them around its pass, and exits 1 with the code when a start hook refuses."""

from __future__ import annotations

import signal
import subprocess
import sys

import orjson
import pytest

from tests.daemon_fixtures import ROOT, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

HOOKS_APP = "tests.apps.hooks_app"


def test_the_start_hook_builds_the_child_s_client_and_the_stop_hook_closes_it(daemon_env):
    env = daemon_env
    daemon = env.start("--app", HOOKS_APP, "--queue", "hooked=1x2")
    daemon.ready()
    [worker] = daemon.children("hooked")
    ids = env.enqueue("uses_client", "hooked", [{"n": n} for n in range(5)], key=lambda i: f"hooked:{i['n']}")
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where id = any(%s) and state = 'completed'",
                             ids) == 5, 30, "the five jobs to complete")
    built_in = {pid for (pid,) in env.sql("select pid from {schema}.effects where name = 'body'")}
    assert built_in == {worker["pid"]} and worker["pid"] != daemon.pid
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    assert env.sql("select pid from {schema}.effects where name = 'stop hook'") == [(worker["pid"],)]


def test_a_raising_start_hook_stops_its_child_which_is_restarted_with_the_back_off(daemon_env):
    env = daemon_env
    daemon = env.start("--app", HOOKS_APP, "--queue", "hooked=1x1", "--log-format", "json",
                       HOOKS_APP_FAIL="1")
    [job_id] = env.enqueue("uses_client", "hooked", [{"n": 1}], key=lambda i: f"hooked:{i['n']}")

    def looping() -> dict | None:
        answer = daemon.try_status()
        hooked = [c for c in (answer or {}).get("children", ()) if c.get("queue") == "hooked"]
        return hooked[0] if hooked and hooked[0]["crash_loop"] and hooked[0]["restarts"] >= 3 else None
    child = wait_for(looping, 60, "the hooked worker to be in a crash loop")
    assert child["state"] in ("crash-loop", "backoff", "starting"), child
    assert "X_WORKER_START_FAILED" in child["last_exit"] and "open_client" in child["last_exit"], child
    wait_for(lambda: daemon.sample("xjobs_child_crash_loop", role="worker", queue="hooked") == 1, 30,
             "/metrics to show the crash loop")
    assert daemon.sample("xjobs_child_restarts", role="worker") >= 3

    def logged() -> list[dict]:   # each child writes its own lines: the last may land after the status
        return [line for line in map(_json, daemon.output().splitlines())
                if line.get("event") == "worker.start_hook.failed"]
    failed = wait_for(lambda: len(logged()) >= 3 and logged(), 20, "three failed start hooks in the log")
    assert failed[0]["hook"] == "tests.apps.hooks_app.open_client", failed[:1]
    assert "ConnectionError: the payments service refused our key" in failed[0]["error"]
    assert any("X_WORKER_START_FAILED" in line.get("message", "") for line in map(_json, daemon.output().splitlines()))
    assert env.job(job_id)["state"] == "ready"        # no child of this queue ever claimed it
    others = [c for c in daemon.status()["children"] if c.get("queue") != "hooked"]
    assert others and all(c["state"] == "ready" for c in others)   # the scheduler and the relay run on
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def _json(line: str) -> dict:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def test_a_tick_runs_the_hooks_and_a_refused_start_exits_1_with_its_code(daemon_env):
    env = daemon_env
    [job_id] = env.enqueue("uses_client", "hooked", [{"n": 7}], key=lambda i: f"hooked:{i['n']}")

    def tick(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "xjobs.cli", "tick", "--app", HOOKS_APP, "--queue", "hooked"],
                              cwd=ROOT, env={**env.process_env, **extra}, capture_output=True, text=True, timeout=60)
    refused = tick(HOOKS_APP_FAIL="1")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "xjobsd: X_WORKER_START_FAILED: on_worker_start hook tests.apps.hooks_app.open_client raised " \
           "ConnectionError: the payments service refused our key" in refused.stderr
    assert env.job(job_id)["state"] == "ready"
    ran = tick()
    assert ran.returncode == 0, ran.stderr
    assert env.job(job_id)["state"] == "completed"
    pids = env.sql("select name, pid from {schema}.effects order by name")
    assert [name for name, _ in pids] == ["body", "stop hook"] and len({pid for _, pid in pids}) == 1
