"""Durable steps through the real daemon: worker children SIGKILLed at random points never
re-run a step that was recorded; a sleeping job holds no worker slot and wakes on time; an
event wakes its waiter through NOTIFY, and a rolled-back send wakes nobody."""

from __future__ import annotations

import os
import random
import signal
import time

import psycopg
import pytest

import xjobs
from tests.daemon_fixtures import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.steps_app"
JOBS = 200


@pytest.mark.slow
def test_killed_workers_never_rerun_a_recorded_step_and_every_job_completes(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "steps=2x8")
    daemon.ready()
    env.enqueue("five_steps", "steps", [{"n": n} for n in range(JOBS)], key=lambda i: f"five:{i['n']}")
    rng = random.Random(7)
    kills = 0
    while kills < 8 and env.one("select count(*) from {schema}.jobs where state <> 'completed'"):
        time.sleep(rng.uniform(0.15, 0.45))
        pids = [c["pid"] for c in daemon.children("steps") if c["pid"] and c["state"] == "ready"]
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills += 1
    assert kills >= 3, "the jobs finished before the test could kill anything"
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where state <> 'completed'") == 0, 120,
             "every job to complete")
    assert env.one("select count(*) from {schema}.job_steps where state = 'completed'") == JOBS * 5
    # an execution of a step that began after the step was recorded is a step run twice
    rerun = env.sql("select e.job_id, e.name, e.at, s.finished_at from {schema}.effects e "
                    "join {schema}.job_steps s on s.job_id = e.job_id and s.name = e.name "
                    "where e.at > s.finished_at")
    assert rerun == []
    executions = env.sql("select count(*), count(distinct (job_id, name)) from {schema}.effects")
    assert executions[0][1] == JOBS * 5
    restarts = sum(c["restarts"] for c in daemon.children("steps"))
    assert restarts >= kills
    print(f"\n{kills} kills, {executions[0][0] - JOBS * 5} step bodies ran again before their "
          f"result was recorded")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


@pytest.mark.timing
def test_a_sleeping_job_holds_no_slot_and_wakes_on_time_with_its_attempt(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "naps=1x1")
    daemon.ready()
    [napper] = env.enqueue("napper", "naps", [{"n": 1, "seconds": 2}], key=lambda i: "nap:1")
    wait_for(lambda: env.job(napper)["state"] == "suspended", 10, "the napper to park")
    quick = env.enqueue("quick", "naps", [{"n": n} for n in range(3)], key=lambda i: f"quick:{i['n']}")
    wait_for(lambda: all(env.job(j)["state"] == "completed" for j in quick), 10,
             "the quick jobs to run in the napper's slot")
    assert env.job(napper)["state"] == "suspended"          # they ran while it slept
    wait_for(lambda: env.job(napper)["state"] == "completed", 10, "the napper to wake and finish")
    late_ms = env.one("select extract(epoch from e.at - s.wake_at) * 1000 from {schema}.effects e "
                      "join {schema}.job_steps s on s.job_id = e.job_id and s.name = 'nap' "
                      "where e.name = 'nap:after'")
    assert 0 <= late_ms < 1000, late_ms
    assert env.job(napper)["attempt"] == 1 and env.job(napper)["last_error"] is None
    assert env.one("select count(*) from {schema}.effects where name = 'nap:before'") == 1
    wait_for(lambda: daemon.sample("xjobs_jobs", "xjobs_jobs_total", queue="naps", job_name="napper",
                                   outcome="suspended") == 1, 15, "the park in /metrics")
    wait_for(lambda: daemon.sample("xjobs_steps", "xjobs_steps_total", queue="naps", kind="woke") == 1, 15,
             "the wake-up in /metrics")
    assert daemon.sample("xjobs_queue_depth", queue="naps") == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def test_an_event_wakes_its_waiter_through_notify_and_a_rolled_back_send_wakes_nobody(daemon_env):
    env = daemon_env
    # no poll, no wake timer, no rescue within the test: only a notification can start a woken job
    daemon = env.start("--app", APP, "--queue", "events=1x4", XJOBS_POLL="10m", XJOBS_WAKE="10m",
                       XJOBS_RESCUE="10m")
    daemon.ready()
    first, second = env.enqueue("waiter", "events", [{"key": "o-1"}, {"key": "o-2"}],
                                key=lambda i: f"wait:{i['key']}")
    wait_for(lambda: env.job(first)["state"] == env.job(second)["state"] == "suspended", 10,
             "both waiters to park")
    with psycopg.connect(env.dsn) as conn:
        with conn.transaction():
            xjobs.send_event("order.paid", key="o-2", payload={"amount": 99}, conn=conn, driver=env.driver)
            raise psycopg.Rollback()
        sent_at = time.monotonic()
        with conn.transaction():
            xjobs.send_event("order.paid", key="o-1", payload={"amount": 5}, conn=conn, driver=env.driver)
    wait_for(lambda: env.job(first)["state"] == "completed", 10, "the o-1 waiter to get its event")
    took_ms = (time.monotonic() - sent_at) * 1000
    assert env.one("select count(*) from {schema}.effects where name = 'paid:o-1:5'") == 1
    assert env.job(second)["state"] == "suspended"
    assert env.one("select count(*) from {schema}.events where key = 'o-2'") == 0
    xjobs.send_event("order.paid", key="o-2", payload={"amount": 7}, driver=env.driver)
    wait_for(lambda: env.job(second)["state"] == "completed", 10, "the o-2 waiter to get its event")
    assert env.one("select count(*) from {schema}.effects where name like 'paid:o-2:%'") == 1
    assert env.one("select count(*) from {schema}.effects where name = 'paid:o-2:7'") == 1
    wait_for(lambda: daemon.sample("xjobs_steps", "xjobs_steps_total", queue="events", kind="delivered") == 2, 15,
             "deliveries in /metrics")
    print(f"\nsend to completion through NOTIFY: {took_ms:.1f} ms")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
