"""Snooze and debounce through ``xjobsd run``: a burst of 100 enqueues of one debounced key runs
once, with the last input; a job that snoozes runs again later with its attempt unchanged, and
``/metrics`` counts the snooze."""

from __future__ import annotations

import pytest

from tests.apps import flow_app
from tests.waiting import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.flow_app"


def test_a_debounced_burst_runs_once_and_a_snoozed_job_runs_again_without_an_attempt(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "flow=1x4")
    daemon.ready()
    [nap] = enqueue_many(flow_app.napper, [{"n": 1}], driver=env.driver)
    # each enqueue moves the waiting job 2 s on: the burst ends long before the last one is due
    burst = [e for v in range(100) for e in enqueue_many(flow_app.latest, [{"doc": 1, "v": v}], driver=env.driver)]
    job_id = burst[0].id
    assert {e.id for e in burst} == {job_id} and not burst[0].deduped
    assert all(e.deduped and e.debounced for e in burst[1:])
    wait_for(lambda: env.job(job_id)["state"] == "completed", 30, "the debounced job to complete")
    assert env.sql("select payload, result, attempt from {schema}.jobs where name = 'latest'") == [
        ({"doc": 1, "v": 99}, {"v": 99, "attempt": 1}, 1)]
    wait_for(lambda: env.job(nap.id)["state"] == "completed", 30, "the snoozed job to run again")
    assert env.sql("select attempt, snoozes, result, last_error from {schema}.jobs where id = %s", nap.id) == [
        (1, 1, {"attempt": 1, "snoozes": 1}, None)]
    assert [r[0] for r in env.sql("select outcome from {schema}.job_history where job_id = %s order by seq",
                                  nap.id)] == ["snoozed"]
    wait_for(lambda: daemon.sample("xjobs_jobs", "xjobs_jobs_total", queue="flow", job_name="napper", outcome="snoozed") == 1,
             10, "the snooze counted in xjobs_jobs_total")
