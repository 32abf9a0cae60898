"""``purge()`` through the real daemon: a worker SIGKILLed while the second of three targets
runs leaves a pass that resumes at that target, with the first attempt's ``now`` for all."""

from __future__ import annotations

import os
import signal

import pytest

from tests.daemon_fixtures import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.purge_app"


def test_a_purge_killed_on_its_second_target_resumes_there_with_one_now_for_all(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "purge=1x1")
    daemon.ready()
    [job] = env.enqueue("sweep", "purge", [{}], key=lambda i: "purge:sweep")
    wait_for(lambda: env.sql("select 1 from {schema}.effects where job_id = %s and name like 'bb:%%'", job), 20,
             "the second target to start")
    [worker] = [c["pid"] for c in daemon.children("purge")]
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: env.job(job)["state"] == "completed", 60, "the purge to finish on its next attempt")
    calls = env.sql("select split_part(name, ':', 1), split_part(name, ':', 2)::bigint, attempt "
                    "from {schema}.effects where job_id = %s order by at", job)
    [(_, now, _)] = {(t, n, a) for t, n, a in calls if t == "a"}
    assert [(t, n) for t, n, _ in calls] == [("a", now), ("bb", now), ("bb", now), ("ccc", now)]
    first, second = calls[1][2], calls[2][2]
    assert calls[0][2] == first < second == calls[3][2]           # a ran once; bb again, then ccc
    steps = env.sql("select name, result::text from {schema}.job_steps where job_id = %s order by seq", job)
    assert steps == [("now", str(now)), ("purge:a", "2"), ("purge:bb", "3"), ("purge:ccc", "4")]
    assert any(c["restarts"] >= 1 for c in daemon.children("purge"))
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
