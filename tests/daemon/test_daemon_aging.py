"""Priority aging through a real daemon: on a queue of one slot, a job enqueued at priority 9
ahead of a long stream of priority-0 jobs runs while plenty of the stream still waits when its
queue declares ``aging``, and after all of it on a queue that does not."""

from __future__ import annotations

import signal

import pytest

from tests.apps import aging_app
from tests.daemon_fixtures import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

LEFT = "select count(*) from {schema}.jobs where queue = %s and state <> 'completed'"
# the jobs of a queue in the order they started
ORDER = "select priority, base_priority from {schema}.jobs where queue = %s order by started_at, id"
STREAM = {"aging": 400, "plain": 60}   # about 4 s of work on the aging queue: 13 steps of 300 ms


def test_a_low_priority_job_outwaits_a_stream_of_urgent_ones_only_on_an_aging_queue(daemon_env):
    env = daemon_env
    for handle in (aging_app.aging_work, aging_app.plain_work):
        enqueue_many(handle, [{"n": -1}], priority=9, driver=env.driver)
        enqueue_many(handle, [{"n": n} for n in range(STREAM[handle.queue])], priority=0, driver=env.driver)
    daemon = env.start("--app", "tests.apps.aging_app", "--queue", "aging=1", "--queue", "plain=1")
    daemon.ready()
    wait_for(lambda: env.one(LEFT, "aging") + env.one(LEFT, "plain") == 0, 90, "every job to complete")
    aged = env.sql(ORDER, "aging")
    [at] = [i for i, (_, base) in enumerate(aged) if base == 9]
    assert aged[at][0] == 0                                   # it came level with the stream
    assert len(aged) - at > 100, f"the aged job started {at}th of {len(aged)}"
    plain = env.sql(ORDER, "plain")
    assert plain[-1] == (9, None), plain                     # without aging: after all of them
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
