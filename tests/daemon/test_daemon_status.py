"""``xjobsd status`` over the real control socket, and /metrics, /healthz, /readyz over HTTP."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess

import orjson
import pytest

from tests.daemon_fixtures import CLI, wait_for
from xjobs.drivers.base import NewJob

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

DESIGN_METRICS = ["xjobs_queue_depth", "xjobs_queue_jobs", "xjobs_queue_oldest_ready_seconds",
                  "xjobs_jobs", "xjobs_job_duration_seconds", "xjobs_lease_lost", "xjobs_in_flight",
                  "xjobs_child_restarts", "xjobs_queue_paused", "xjobs_scheduler_leader",
                  "xjobs_outbox_pending", "xjobs_outbox_oldest_seconds"]
CHILD_FIELDS = {"role", "queue", "pid", "state", "in_flight", "completed", "restarts", "uptime"}


def cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), cwd=env.tmp, env=env.process_env, capture_output=True,
                          text=True, timeout=30)


def test_status_lists_every_child_as_json_and_as_a_table(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=2x8", "--queue", "slow=1x2")
    daemon.ready()
    assert stat.S_IMODE(os.stat(daemon.control).st_mode) == 0o600

    result = cli(env, "status", "--json", "--control", daemon.control)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["pid"] == daemon.pid and answer["state"] == "running"
    workers = [c for c in answer["children"] if c["role"] == "worker"]
    assert sorted((c["queue"], c["index"]) for c in workers) == [("alpha", 1), ("alpha", 2), ("slow", 1)]
    assert sorted(c["role"] for c in answer["children"] if c["role"] != "worker") == ["outbox-relay", "scheduler"]
    for child in workers:
        assert CHILD_FIELDS <= set(child), child
        assert child["role"] == "worker" and child["state"] == "ready" and child["pid"] > 0
        assert child["in_flight"] == 0 and child["restarts"] == 0
    assert set(answer["queues"]) >= {"alpha", "slow"}
    assert {"depth", "oldest_ready_seconds"} <= set(answer["queues"]["alpha"])

    table = cli(env, "status", "--control", daemon.control)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("ROLE"))
    for column in ("QUEUE", "PID", "STATE", "UPTIME", "IN FLIGHT", "COMPLETED", "RESTARTS"):
        assert column in header
    assert sum(1 for line in lines if line.startswith("worker")) == 3
    assert any(line.startswith("QUEUE") and "DEPTH" in line and "OLDEST READY" in line for line in lines)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(10) == 0


def test_status_without_a_daemon_fails_clearly(daemon_env):
    result = cli(daemon_env, "status", "--control", str(daemon_env.tmp / "nobody.sock"))
    assert result.returncode == 1
    assert "no xjobsd is running" in result.stderr
    assert result.stdout == ""
    stale = daemon_env.tmp / "stale.sock"
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()   # a socket file nobody listens on, as a crashed daemon leaves behind
    result = cli(daemon_env, "status", "--json", "--control", str(stale))
    assert result.returncode == 1 and "no xjobsd is running" in result.stderr


def test_metrics_parse_hold_every_design_name_and_depth_matches_sql(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x1", "--queue", "alpha=1x4")
    daemon.ready()
    status, body = daemon.http("/healthz")
    assert status == 200
    wait_for(lambda: daemon.http("/readyz")[0] == 200, 5, "/readyz to answer 200")

    families = daemon.metrics()
    missing = [name for name in DESIGN_METRICS if name not in families]
    assert not missing, missing
    # a lone daemon leads, once its scheduler's first round took the lease
    wait_for(lambda: daemon.sample("xjobs_scheduler_leader") == 1, 10, "the scheduler to lead")
    assert families["xjobs_jobs"].type == "counter"
    assert families["xjobs_job_duration_seconds"].type == "histogram"

    # one slot, held by a long job: everything behind it waits, so the depth holds still
    blocker = env.enqueue("hold", "slow", [{"n": 0, "seconds": 60}], key=lambda i: f"hold:{i['n']}")[0]
    wait_for(lambda: env.job(blocker)["state"] == "running", 10, "the blocker to run")
    env.enqueue("hold", "slow", [{"n": n, "seconds": 0} for n in range(1, 8)], key=lambda i: f"hold:{i['n']}")
    in_sql = env.one("select count(*) from {schema}.jobs where queue = 'slow' and state = 'ready' "
                     "and run_at <= now()")
    assert in_sql == 7
    wait_for(lambda: daemon.sample("xjobs_queue_depth", queue="slow") == in_sql, 5,
             "xjobs_queue_depth{queue=slow} to match SQL")
    assert daemon.sample("xjobs_queue_jobs", state="ready", queue="slow") == in_sql
    assert daemon.sample("xjobs_queue_oldest_ready_seconds", queue="slow") >= 0
    wait_for(lambda: daemon.sample("xjobs_in_flight", queue="slow") == 1, 3, "the next heartbeat")
    assert daemon.status()["queues"]["slow"]["depth"] == in_sql

    daemon.signal(signal.SIGTERM)
    wait_for(lambda: daemon.http("/readyz")[0] == 503 if daemon.proc.poll() is None else True, 5,
             "/readyz to turn 503 while draining")
    assert daemon.wait(10) == 0


def test_with_no_database_configured_an_embedded_one_starts_under_dot_xjobs(daemon_env, tmp_path):
    pytest.importorskip("pgserver")
    env = dict(daemon_env.process_env)
    env.pop("XJOBS_DATABASE_URL")
    control = str(tmp_path / "embedded.sock")
    log_path = tmp_path / "embedded.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(CLI + ["run", "--app", "tests.apps.daemon_app", "--queue", "alpha=1x2",
                                       "--metrics", "off", "--control", control],
                                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            from xjobs.control_client import ControlUnavailable, request

            def ready():
                assert proc.poll() is None, log_path.read_text()
                try:
                    answer = request(control, "status")
                except ControlUnavailable:
                    return None
                return answer if answer["children"] and answer["children"][0]["state"] == "ready" else None
            wait_for(ready, 60, "the daemon on an embedded database")
            said = log_path.read_text()
            assert f"database: embedded PostgreSQL in {tmp_path / '.xjobs' / 'pgdata'}" in said
            assert "queue alpha: 1 process(es) x 2 slot(s); jobs touch_alpha" in said
            assert "queue beta: NOT SERVED by this daemon; jobs touch_beta" in said
            assert f"control socket: {control}" in said
            recorded = orjson.loads((tmp_path / ".xjobs" / "daemon.json").read_bytes())
            assert (recorded["pid"], recorded["control"]) == (proc.pid, control)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_job_no_worker_has_a_body_for_waits_and_shows_as_unknown(daemon_env):
    env = daemon_env
    daemon = env.start("--app", "tests.apps.daemon_app", "--queue", "alpha=1x2", XJOBS_STATS_INTERVAL="200ms")
    daemon.ready()
    ghost = env.enqueue_one("ghost", "alpha", {"n": 1}, "ghost:1")      # a job type this code lacks
    known = env.enqueue_one("touch_alpha", "alpha", {"n": 2}, "a:2")
    # due in an hour: it waits, and says why, as "scheduled"
    env.driver.job_enqueue([NewJob(name="touch_alpha", queue="alpha", payload=b'{"n": 3}',
                                   idempotency_key="a:3", delay_ms=3_600_000.0)])
    wait_for(lambda: env.job(known)["state"] == "completed", 10, "the known job to run")
    wait_for(lambda: daemon.status()["queues"]["alpha"].get("unknown_jobs") == 1, 10, "status to show it")
    wait_for(lambda: daemon.sample("xjobs_queue_unknown_jobs", queue="alpha") == 1, 10, "/metrics to show it")
    wait_for(lambda: daemon.sample("xjobs_queue_waiting_jobs", queue="alpha", reason="scheduled") == 1, 10,
             "/metrics to count the scheduled job")
    assert daemon.sample("xjobs_queue_waiting_jobs", queue="alpha", reason="key") == 0
    assert daemon.status()["queues"]["alpha"]["waiting"] == {"scheduled": 1}
    table = cli(env, "status", "--control", daemon.control).stdout.splitlines()
    assert "WAITING" in next(line for line in table if line.startswith("QUEUE"))
    assert next(line for line in table if line.startswith("alpha")).rstrip().endswith("1 scheduled")
    assert env.job(ghost) == {"state": "ready", "attempt": 0, "last_error": None}   # never claimed
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
