"""Fair claims through a real daemon: tenant b's jobs, enqueued while tenant a's backlog is
being worked through, start before that backlog is drained, as the rows' start times say."""

from __future__ import annotations

import signal

import pytest

from tests.apps import fair_app
from tests.daemon_fixtures import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

COMPLETED = "select count(*) from {schema}.jobs where state = 'completed' and tenant = %s"


def test_a_tenants_jobs_start_before_another_tenants_backlog_is_drained(daemon_env):
    env = daemon_env
    enqueue_many(fair_app.fair_work, [{"t": "a", "n": n} for n in range(40)], driver=env.driver)
    daemon = env.start("--app", "tests.apps.fair_app", "--queue", "fair=1x2")
    daemon.ready()
    wait_for(lambda: env.one(COMPLETED, "a") >= 2, 20, "a's backlog to be under way")
    enqueue_many(fair_app.fair_work, [{"t": "b", "n": n} for n in range(4)], driver=env.driver)
    wait_for(lambda: env.one(COMPLETED, "a") + env.one(COMPLETED, "b") == 44, 60, "every job to complete")
    # in the order the jobs started: b's four are all in before a's backlog runs out
    order = [tenant for (tenant,) in env.sql("select tenant from {schema}.jobs order by started_at, id")]
    last_b = max(i for i, tenant in enumerate(order) if tenant == "b")
    assert order[last_b + 1:].count("a") >= 20, order
    # a tenant leaves the rotation at the first claim that finds it has nothing left
    wait_for(lambda: env.one("select count(*) from {schema}.fair_tenants") == 0, 10, "the rotation to empty")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
