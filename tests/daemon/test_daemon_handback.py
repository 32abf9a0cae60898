"""Handing a dead child's jobs back: when (its sessions, the app's included, are gone) and
whether the attempt counts (only when the child crashed), and retirements that interrupt nothing."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.daemon_fixtures import wait_for
from xjobs.supervisor.draining import REPEAT_WINDOW_S

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def effects(env, job_id: int) -> list[tuple]:
    return env.sql("select name, attempt, pid, at from {schema}.effects where job_id = %s order by at", job_id)


def test_the_hand_back_waits_for_the_dead_childs_own_app_connections(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "appconn=1x2")
    daemon.ready()
    child = daemon.children()[0]
    job_id = env.enqueue_one("app_conn_write", "appconn", {"n": 1, "sleep": 3}, "ac:1")
    slow = wait_for(lambda: env.backends("query like '%%late-write%%' and state = 'active'"), 10,
                    "the app's slow statement to run")
    assert slow[0][0] == child["identity"]   # the app's unnamed connection carries the child's name

    os.kill(child["pid"], signal.SIGKILL)
    runs = wait_for(lambda: [e for e in effects(env, job_id) if e[0] == "app_conn_write"][1:], 20,
                    "the job to be delivered again")
    late = [e for e in effects(env, job_id) if e[0] == "late-write"]
    assert late, "delivered again while the dead child's statement was still running"
    assert late[0][3] <= runs[0][3]
    wait_for(lambda: env.job(job_id)["state"] == "completed", 10, "the second run to complete")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def test_a_second_sigterm_gives_a_last_attempt_back_instead_of_dead_lettering_it(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2", "--drain-deadline", "60s")
    daemon.ready()
    job_id = env.enqueue_one("hold", "slow", {"n": 1, "seconds": 60, "watch": False}, "hold:1", max_attempts=1)
    wait_for(lambda: effects(env, job_id), 10, "the job to start")
    daemon.signal(signal.SIGTERM)
    wait_for(lambda: "draining" in daemon.output(), 5, "the drain to begin")
    time.sleep(REPEAT_WINDOW_S + 0.5)   # a time, not a synchronisation: sooner is the same stop twice
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(10) == 0
    wait_for(lambda: env.job(job_id)["state"] != "running", 5, "the hand-back")
    job = env.job(job_id)
    assert job["state"] == "ready" and job["attempt"] == 0, job


def test_a_sighup_that_changes_nothing_leaves_the_child_and_its_running_job_alone(daemon_env):
    env = daemon_env
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["slow=1x2"]\n')
    daemon = env.start("--config", str(config))
    daemon.ready()
    old = daemon.children()[0]["pid"]
    job_id = env.enqueue_one("hold", "slow", {"n": 1, "seconds": 4, "watch": True}, "hold:1")
    wait_for(lambda: effects(env, job_id), 10, "the job to start")

    daemon.signal(signal.SIGHUP)
    wait_for(lambda: "no group changed, no child is replaced" in daemon.output(), 20, "the reload's verdict")
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the job to finish on the old child")
    assert [(name, pid) for name, _, pid, _ in effects(env, job_id)] == [("hold", old)]
    assert env.one("select count(*) from {schema}.job_history where job_id = %s and outcome = 'interrupted'",
                   job_id) == 0
    assert [c["pid"] for c in daemon.children()] == [old]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
