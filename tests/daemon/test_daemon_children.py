"""Workflows through the real daemon: a parent maps over 1,000 children while worker
processes of the children's queue (and now and then the parent's) are SIGKILLed at random; a
three-level tree is cancelled at its root; a batch of 500 with 10 failing members runs its
callback once."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

import xjobs
from tests.daemon_fixtures import wait_for
from xjobs.drivers.postgres import PostgresDriver

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.children_app"
CHILDREN = 1000


@pytest.mark.slow
def test_a_map_over_1000_children_survives_killed_workers_and_wakes_its_parent_once(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "kids=2x8", "--queue", "parents=1x2")
    daemon.ready()
    [parent] = env.enqueue("fan_parent", "parents", [{"n": CHILDREN}], key=lambda i: "fan:1000")
    rng = random.Random(11)
    kills = 0
    while kills < 6 and env.job(parent)["state"] != "completed":
        time.sleep(rng.uniform(0.2, 0.6))
        # mostly the children's workers; now and then the parent's, which may be mid-insert of
        # its children (a transaction that dies with it: its next attempt inserts them again)
        queue = "parents" if kills % 3 == 0 else "kids"
        pids = [c["pid"] for c in daemon.children(queue) if c["pid"] and c["state"] == "ready"]
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills += 1
    wait_for(lambda: env.job(parent)["state"] == "completed", 180, "the parent to complete")
    # exactly one child row per input, each with its index; every child body ran at least once
    assert env.sql("select count(*), count(distinct fanin_index) from {schema}.jobs where parent_id = %s",
                   parent) == [(CHILDREN, CHILDREN)]
    assert env.one("select count(distinct e.job_id) from {schema}.effects e join {schema}.jobs j "
                   "on j.id = e.job_id where j.parent_id = %s", parent) == CHILDREN
    assert env.one("select count(*) from {schema}.jobs where parent_id = %s and state <> 'completed'",
                   parent) == 0
    # the parent resumed once, with the results in input order, and was woken ONCE
    # (a kill between the resumed step's body and its record runs that body again: at least once)
    assert env.sql("select distinct name from {schema}.effects where job_id = %s", parent) == [("parent:in-order",)]
    assert env.one("select count(*) from {schema}.jobs where id = %s and state = 'completed'", parent) == 1
    assert env.one("select woken from {schema}.fanins where parent_id = %s", parent) == 1
    assert env.one("select count(*) from {schema}.job_history where job_id = %s and outcome = 'suspended'",
                   parent) == 1
    ran = env.one("select count(*) from {schema}.effects e join {schema}.jobs j on j.id = e.job_id "
                  "where j.parent_id = %s", parent)
    print(f"\n{kills} kills, {ran - CHILDREN} child bodies ran again")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_a_three_level_tree_cancelled_at_its_root_leaves_nothing_running(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "kids=1x8", "--queue", "parents=1x1")
    daemon.ready()
    [root] = env.enqueue("tree_root", "parents", [{}], key=lambda i: "root")
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where state = 'suspended' "
                             "and name = 'tree_leaf'") == 9, 60, "nine leaves suspended")
    env.driver.job_cancel(root, "operator")
    descendants = "with recursive tree(id) as (select id from {schema}.jobs where parent_id = %s " \
                  "union all select j.id from {schema}.jobs j join tree t on j.parent_id = t.id) "
    assert env.sql(descendants + "select j.state, count(*) from {schema}.jobs j join tree t on t.id = j.id "
                   "group by 1", root) == [("cancelled", 12)]
    assert env.one(descendants + "select count(*) from {schema}.jobs j join tree t on t.id = j.id "
                   "where j.state in ('ready', 'running', 'suspended')", root) == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_a_batch_of_500_with_10_failing_members_runs_its_callback_once(daemon_env):
    env = daemon_env
    from tests.apps import children_app
    daemon = env.start("--app", APP, "--queue", "kids=1x16", "--queue", "parents=1x1")
    daemon.ready()
    driver = PostgresDriver(env.dsn, schema=env.schema, application_name="xjobs-tests")
    try:
        opened = xjobs.batch(children_app.batch_member, [{"x": x} for x in range(500)],
                             on_complete=children_app.batch_done, on_complete_input={"why": "test"},
                             driver=driver)
    finally:
        driver.close()
    wait_for(lambda: env.job(opened.callback_id)["state"] == "completed", 120, "the callback to run")
    assert env.sql("select name from {schema}.effects where job_id = %s", opened.callback_id) == [
        ("batch:490/10/0",)]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
