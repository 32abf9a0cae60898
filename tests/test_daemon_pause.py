"""A paused queue is claimed by no daemon of the fleet; resumed, its jobs run at once."""

from __future__ import annotations

import signal
import time

import pytest

from tests.daemon_fixtures import daemon_env, wait_for  # noqa: F401 (fixture)
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
