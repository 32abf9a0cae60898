"""The daemon's log: JSON, one object per line, and a failing job's story found by its id; text,
whose lines from inside a job name it and whose times carry their offset."""

from __future__ import annotations

import os
import signal
from datetime import datetime

import orjson
import pytest

from tests.daemon_fixtures import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def test_a_failing_jobs_story_is_greppable_from_the_json_log_by_its_id(daemon_env):
    env = daemon_env
    daemon = env.start("--app", "tests.apps.tick_app", "--queue", "t5=1x1", "--log-format", "json",
                       "--log-level", "debug")
    daemon.ready()
    job_id = env.enqueue_one("doomed", "t5", {"n": 7}, "doomed:7", max_attempts=2)
    wait_for(lambda: env.job(job_id)["state"] == "dead", 15, "the job to die")

    def story() -> list[dict]:
        daemon.log.flush()
        text = daemon.log_path.read_text(errors="replace")
        lines = [orjson.loads(line) for line in text.splitlines() if line.startswith("{")]
        return [line for line in lines if line.get("job_id") == job_id]
    wait_for(lambda: any(line.get("event") == "job.dead" for line in story()), 10, "the dead letter in the log")
    events = [line.get("event", line["message"]) for line in story()]
    assert events == ["job.attempt.started", "about to fail", "job.attempt.failed", "job.retried",
                      "job.attempt.started", "about to fail", "job.attempt.failed", "job.dead"], events
    failed = [line for line in story() if line.get("event") == "job.attempt.failed"]
    assert [f["verdict"] for f in failed][0].startswith("retry in") and failed[1]["verdict"] == "dead"
    assert all(line["job"] == "doomed" and line["queue"] == "t5" for line in story())
    assert [line["attempt"] for line in failed] == [1, 2]
    said = next(line for line in story() if line["message"] == "about to fail")
    assert said["customer"] == 7 and said["level"] == "info" and "ts" in said   # ctx.log's own fields
    assert next(line for line in story() if line.get("event") == "job.dead")["level"] == "warning"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def _json_lines(daemon) -> list[dict]:
    """Every line of the daemon's log, each parsed: a line that is not JSON fails the test."""
    daemon.log.flush()
    lines = []
    for line in daemon.log_path.read_text(errors="replace").splitlines():
        try:
            lines.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            raise AssertionError(f"not a JSON line in --log-format json: {line!r}") from None
    return lines


def test_in_json_mode_every_line_is_json_the_start_is_one_event_and_a_drain_names_its_events(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2", "--queue", "alpha=1x1", "--log-format", "json")
    daemon.ready()
    [alpha] = daemon.children("alpha")
    os.kill(alpha["pid"], signal.SIGKILL)           # a crash: restarted, by name
    wait_for(lambda: any(c["pid"] != alpha["pid"] and c["state"] == "ready"
                         for c in daemon.children("alpha")), 20, "the alpha worker to come back")
    [job_id] = env.enqueue("hold", "slow", [{"n": 1, "seconds": 30}], key=lambda i: f"hold:{i['n']}")
    wait_for(lambda: env.job(job_id)["state"] == "running", 10, "the job to run")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(20) == 0
    lines = _json_lines(daemon)
    started = [line for line in lines if line.get("event") == "child.started"]
    assert {line["role"] for line in started} >= {"worker", "scheduler", "outbox-relay"}
    assert alpha["pid"] in {line["pid"] for line in started}
    [restarted] = [line for line in lines if line.get("event") == "child.restarted"]
    assert (restarted["level"], restarted["pid"], restarted["role"]) == ("warning", alpha["pid"], "worker")
    assert "SIGKILL" in restarted["how"] and restarted["restart_in_s"] >= 0
    exited = [line for line in lines if line.get("event") == "child.exited"]
    assert {line["pid"] for line in exited} == {line["pid"] for line in started} - {alpha["pid"]}
    [start] = [line for line in lines if line.get("event") == "daemon.started"]
    assert start["level"] == "info" and start["pid"] == daemon.pid
    assert [(q["queue"], q["processes"], q["concurrency"]) for q in start["queues"]] == [
        ("alpha", 1, 1), ("slow", 1, 2)]
    assert "hold" in start["queues"][1]["jobs"]
    assert start["database"]["schema"] == env.schema and start["database"]["embedded"] is False
    assert start["control"] == daemon.control and start["metrics"] == f"http://127.0.0.1:{daemon.port}/metrics"
    signalled = {line["worker"]: line for line in lines if line.get("event") == "worker.drain.signalled"}
    assert len(signalled) == 2 and all(line["interrupted"] is True and line["level"] == "info"
                                       for line in signalled.values())
    assert sorted(line["runs"] for line in signalled.values()) == [0, 1]
    [interrupted] = [line for line in lines if line.get("event") == "job.interrupted"]
    assert (interrupted["job_id"], interrupted["job"], interrupted["queue"]) == (job_id, "hold", "slow")
    assert env.job(job_id)["state"] == "ready" and env.job(job_id)["attempt"] == 0


def test_a_text_line_from_inside_a_job_names_the_job_and_its_time_carries_the_offset(daemon_env):
    env = daemon_env
    daemon = env.start("--app", "tests.apps.tick_app", "--queue", "t5=1x1", "--log-format", "text")
    daemon.ready()
    job_id = env.enqueue_one("doomed", "t5", {"n": 8}, "doomed:8", max_attempts=1)
    wait_for(lambda: env.job(job_id)["state"] == "dead", 15, "the job to die")

    def said(words: str) -> list[str]:
        daemon.log.flush()
        return [line for line in daemon.log_path.read_text(errors="replace").splitlines() if words in line]
    wait_for(lambda: said("about to fail"), 10, "ctx.log's line in the log")
    [line] = said("about to fail")
    ts, level, rest = line.split(" ", 2)
    assert level == "INFO" and ts.endswith("+00:00") and datetime.fromisoformat(ts).tzinfo is not None
    assert rest.split(": ", 1)[1] == f"job doomed#{job_id} attempt 1: about to fail"   # as the events name it
    # the worker logs the death once its transaction committed: the row can be read first
    wait_for(lambda: said(f"job doomed#{job_id} dead: "), 10, "the death's line in the log")
    [died] = said(f"job doomed#{job_id} dead: ")   # an event's line: its own words, no prefix
    assert died.split(" ")[1] == "WARNING" and died.split(" ")[0].endswith("+00:00")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
