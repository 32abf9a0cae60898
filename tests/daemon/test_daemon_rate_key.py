"""A fleet-wide rate by key through real daemons: ``rated_call`` declares ``rate="50/1s"`` by
its input's key, and two supervisors run four worker processes each for it. Counted from the
jobs' ``started_at`` in SQL, no key ever starts more than 50 (+1 for the window's edge) in a
second; every job runs, once, on its first attempt (a refused start spends none)."""

from __future__ import annotations

import signal

import pytest

from tests.daemon_fixtures import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.rated_app"
HOT, COLD = 200, 20

STARTS_PER_SECOND = """
    select rate_key, date_trunc('second', started_at) as second, count(*)
    from {schema}.jobs where name = 'rated_call' group by 1, 2 order by 1, 2
"""


@pytest.mark.slow
def test_a_key_starts_at_most_its_rate_per_second_across_two_daemons_and_every_job_runs_once(daemon_env):
    from tests.apps.rated_app import rated_call

    env = daemon_env
    daemons = [env.start("--app", APP, "--queue", "rated=2x8") for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    inputs = [{"n": n, "key": "hot"} for n in range(HOT)] + [{"n": HOT + n, "key": "cold"} for n in range(COLD)]
    ids = [e.id for e in enqueue_many(rated_call, inputs, driver=env.driver)]

    def completed() -> int:
        return env.one("select count(*) from {schema}.jobs where name = 'rated_call' and state = 'completed'")

    wait_for(lambda: completed() == HOT + COLD, 60, "every rated job to complete")
    seconds = env.sql(STARTS_PER_SECOND)
    assert max(n for _, _, n in seconds) <= 51, seconds
    hot = [n for key, _, n in seconds if key == "hot"]
    assert len(hot) >= HOT // 50 and sum(hot) == HOT, seconds    # it took at least four windows
    # the cold key is counted apart: it did not wait behind the hot key's windows
    assert sum(n for key, _, n in seconds if key == "cold") == COLD, seconds
    # (all of its starts came before the hot key's last window opened: the windows are whole
    # seconds of the database's clock, and a loaded machine may start the first one late)
    assert env.one("select max(started_at) filter (where rate_key = 'cold') "
                   "< date_trunc('second', max(started_at) filter (where rate_key = 'hot')) "
                   "from {schema}.jobs where name = 'rated_call'"), seconds
    assert env.sql("select distinct attempt from {schema}.jobs where id = any(%s)", ids) == [(1,)]
    assert env.one("select count(*) from {schema}.jobs where id = any(%s) and last_error is not null", ids) == 0
    runs = env.sql("select job_id, count(*) from {schema}.effects group by job_id having count(*) <> 1")
    assert runs == [] and env.one("select count(distinct job_id) from {schema}.effects") == HOT + COLD
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(30) == 0
