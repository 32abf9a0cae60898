"""``Enqueued.result()`` through ``xjobsd run``: it returns what the body returned once the
daemon's worker completed the job, raises the dead job's error as ``X_JOB_FAILED``, returns a
result committed with ``ctx.transaction()``, and times out cleanly (``X_TIMEOUT``) on a job no
worker runs, leaving it ready. The waits are LISTENs: the poll interval is ten minutes, so only
the settlement's notification could end them in time (the worker is woken by enqueue's)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import xjobs
from xjobs import Enqueued
from xjobs.errors import JobFailed, ResultTimeout

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.results_app"


def enqueued(env, name: str, n: int) -> Enqueued:
    """The handle enqueue answers, for a job of the app enqueued from here."""
    return Enqueued(env.enqueue_one(name, "results", {"n": n}, f"{name}:{n}"), False)


def test_result_returns_raises_and_times_out_through_the_daemon(daemon_env):
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "results=1x4", XJOBS_POLL="10m")
    daemon.ready()
    # waiters first, on threads of their own: the job completes while they LISTEN
    waiting: dict[int, object] = {}
    early = enqueued(env, "answer", 4)
    thread = threading.Thread(target=lambda: waiting.update({early.id: early.result(60, driver=env.driver)}))
    thread.start()
    thread.join(60)
    assert waiting == {early.id: {"n": 4, "square": 16, "attempt": 1}}
    jobs = [enqueued(env, "answer", n) for n in range(10)]
    assert [job.result(60, driver=env.driver)["square"] for job in jobs] == [n * n for n in range(10)]
    dead = enqueued(env, "refuse", 7)
    with pytest.raises(JobFailed) as err:
        dead.result(60, driver=env.driver)
    assert err.value.code == "X_JOB_FAILED" and "card 7 declined" in (err.value.last_error or "")
    committed = enqueued(env, "commit", 3)
    assert asyncio.run(committed.aresult(60, driver=env.driver)) == {"committed": 3}
    # a queue no worker of this daemon runs: the job stays ready and the wait ends on time
    stuck = env.enqueue_one("answer", "nobody-runs-this", {"n": 1}, "stuck")
    with pytest.raises(ResultTimeout) as timed_out:
        xjobs.result(stuck, 0.5, driver=env.driver)
    assert timed_out.value.code == "X_TIMEOUT" and env.job(stuck)["state"] == "ready"
    assert env.one("select count(*) from {schema}.jobs where state = 'completed' and result is not null") == 12

