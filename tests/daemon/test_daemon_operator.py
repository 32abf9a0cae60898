"""A paused queue is claimed by no daemon of the fleet; resumed, its jobs run at once."""

from __future__ import annotations

import signal
import time

import pytest

from tests.daemon_fixtures import wait_for
from xjobs import admin

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def test_pause_stops_claims_fleet_wide_and_resume_restarts_them(daemon_env):
    env = daemon_env
    first, second = env.start("--queue", "alpha=1x4"), env.start("--queue", "alpha=2x4")
    first.ready()
    second.ready()
    admin.pause_queue(env.driver, "alpha", by="test")
    ids = env.enqueue("touch_alpha", "alpha", [{"n": n} for n in range(20)], key=lambda i: f"a:{i['n']}")
    # the enqueue's notification wakes every worker at once; each claim finds the queue paused.
    # Past one poll interval (1 s) nothing may have run anywhere
    time.sleep(1.5)
    assert env.one("select count(*) from {schema}.jobs where id = any(%s) and state <> 'ready'", ids) == 0
    wait_for(lambda: first.status()["queues"]["alpha"]["paused"] is True, 5, "status to show the pause")
    assert first.sample("xjobs_queue_paused", queue="alpha") == 1
    admin.resume_queue(env.driver, "alpha", by="test")
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where id = any(%s) and state = 'completed'",
                             ids) == 20, 10, "every job to run after the resume")
    runners = env.one("select count(distinct pid) from {schema}.effects")
    assert runners >= 2   # both daemons took part: the switch is the fleet's, not one daemon's
    for daemon in (first, second):
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(15) == 0


def test_progress_shows_in_status_and_jobs_show(daemon_env):
    import subprocess
    from tests.daemon_fixtures import CLI
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2")
    daemon.ready()
    job_id = env.enqueue_one("paged", "slow", {"n": 1, "pages": 7}, "paged:1")

    def reported():
        for child in daemon.status()["children"]:
            for run in child["running"]:
                if run["id"] == job_id and run["progress"]:
                    return run
        return None
    run = wait_for(reported, 10, "status to show the run's progress")
    assert (run["progress"]["done"], run["progress"]["total"], run["progress"]["note"]) == (7, 7, "page 7")
    shown = wait_for(lambda: env.driver.job_get(job_id).progress, 10, "the progress to be written")
    assert shown["note"] == "page 7"
    shown = subprocess.run(CLI + ["jobs", "show", str(job_id)], cwd=env.tmp, env=env.process_env,
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert "progress          7/7  page 7  (at 20" in shown.stdout
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
