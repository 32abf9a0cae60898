"""Concurrency by key through real daemons: two supervisors on one schema never run three of
one account's ``paired`` jobs at once (sampled in SQL every 10 ms while they run), and a
sequence of 300 members on one account runs strictly in enqueue order while other accounts
run beside it, with the worker process running a member SIGKILLed on the way: nothing lost,
no member started before the one before it completed.

``XJOBS_FLOW_ACCEPTANCE=1`` runs them at the size of the acceptance run: a minute of paired
jobs, and a sequence of 1,000 through three SIGKILLs."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests.daemon_fixtures import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.keyed_app"
FULL = os.environ.get("XJOBS_FLOW_ACCEPTANCE") == "1"
PAIRED = 3_600 if FULL else 36           # 0.1 s each, 6 at a time: a minute, or 0.6 s
SEQUENCE = 1_000 if FULL else 300
KILLED = (40, 400, 800) if FULL else (40,)   # slow members (1 s), each killed while it runs


class RunningPerKey:
    """Samples, every 10 ms, the most running jobs of one account seen at once."""

    def __init__(self, env, name: str) -> None:
        self.env, self.name = env, name
        self.most = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.01):
            [(most,)] = self.env.sql("select coalesce(max(n), 0) from (select count(*) as n from {schema}.jobs "
                                     "where name = %s and state = 'running' group by concurrency_key) as per_key",
                                     self.name)
            self.most, self.samples = max(self.most, most), self.samples + 1

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return self.most


def _enqueue(env, handle, inputs: list[dict]) -> list[int]:
    return [e.id for e in enqueue_many(handle, inputs, driver=env.driver)]


def completed(env, name: str) -> int:
    return env.one("select count(*) from {schema}.jobs where name = %s and state = 'completed'", name)


def test_two_daemons_never_run_three_of_one_key_at_once(daemon_env):
    from tests.apps.keyed_app import paired
    env = daemon_env
    daemons = [env.start("--app", APP, "--queue", "keyed=2x4") for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    watch = RunningPerKey(env, "paired")
    try:
        _enqueue(env, paired, [{"n": n, "account": f"acct-{n % 3}", "seconds": 0.1} for n in range(PAIRED)])
        wait_for(lambda: completed(env, "paired") == PAIRED, 40 + PAIRED / 30, "every paired job to complete")
    finally:
        most = watch.stop()
    assert 1 <= most <= 2 and watch.samples > 10, (most, watch.samples)
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(30) == 0


def running_member(env, daemon) -> dict | None:
    holders = {h for (h,) in env.sql("select claimed_by from {schema}.jobs where name = 'sequenced' "
                                     "and concurrency_key = 'S' and state = 'running'")}
    return next((c for c in daemon.children("keyed") if c["identity"] in holders), None)


def test_a_sequence_runs_in_order_beside_other_keys_through_a_killed_worker(daemon_env):
    from tests.apps.keyed_app import sequenced
    env = daemon_env
    daemon = env.start("--app", APP, "--queue", "keyed=3x4", XJOBS_LEASE="3s", XJOBS_HEARTBEAT="500ms")
    daemon.ready()
    ids = _enqueue(env, sequenced, [{"n": n, "account": "S", "seconds": 1.0 if n in KILLED else 0.0}
                                    for n in range(SEQUENCE)])
    others = _enqueue(env, sequenced, [{"n": n, "account": f"T{n % 4}"} for n in range(80)])
    # the worker process running each slow member is killed while it runs it
    for n in KILLED:
        wait_for(lambda: env.one("select state from {schema}.jobs where id = %s", ids[n]) == "running", 60,
                 f"member {n} to run")
        victim = wait_for(lambda: running_member(env, daemon), 10, "the process running it")
        os.kill(victim["pid"], signal.SIGKILL)
    wait_for(lambda: completed(env, "sequenced") == SEQUENCE + 80, 60, "every member to complete")
    # strictly in enqueue order: each member's first start came after the member before it completed
    rows = env.sql("select j.id, extract(epoch from j.finished_at), "
                   "(select extract(epoch from min(e.at)) from {schema}.effects e where e.job_id = j.id) "
                   "from {schema}.jobs j where j.id = any(%s) order by j.id", ids)
    assert [r[0] for r in rows] == ids and all(r[2] is not None for r in rows)
    late = [(a[0], b[0]) for a, b in zip(rows, rows[1:]) if b[2] < a[1]]
    assert late == [], late
    # each killed member was running when its process died: it ran again, and the rest waited for it
    for n in KILLED:
        assert env.one("select count(*) from {schema}.effects where job_id = %s", ids[n]) == 2, n
    # the other accounts ran beside the sequence, each in its own order
    first_other = env.one("select min(at) from {schema}.effects where job_id = any(%s)", others)
    last_member = env.one("select max(at) from {schema}.effects where job_id = any(%s)", ids)
    assert first_other < last_member
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
