"""The outbox through real daemons: application transactions stage jobs while two daemons'
relays are SIGKILLed in turn; afterwards the jobs are exactly the committed outbox rows (none
lost, none twice, none from a rolled-back transaction). And an idle daemon whose poll is ten
minutes away starts every staged job: the relay and the worker both wake on notifications
(how soon, against a raw LISTEN loop, is ``bench/latency.py``'s table)."""

from __future__ import annotations

import os
import signal
import threading
import time

import psycopg
import pytest

from tests.daemon_fixtures import wait_for
from xjobs.outbox import stage

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

COORD = "tests.apps.coord_app"
TRANSACTIONS = 2_000
APP_THREADS = 8


def relay_of(daemon) -> dict | None:
    status = daemon.try_status()
    rows = [c for c in (status or {}).get("children", ()) if c["role"] == "outbox-relay" and c["pid"]]
    return rows[0] if rows else None


class App:
    """Application threads, each committing its own transactions: an order row and its staged
    job together; one in five fails after staging and rolls back."""

    def __init__(self, env, pace_s: float) -> None:
        from tests.apps.coord_app import outboxed
        self.env, self.job, self.pace_s = env, outboxed, pace_s
        self.errors: list[BaseException] = []

    def run(self, first: int) -> None:
        try:
            with psycopg.connect(self.env.dsn) as conn:
                for n in range(first, TRANSACTIONS, APP_THREADS):
                    with conn.transaction():
                        conn.execute(f"insert into {self.env.schema}.orders (n) values (%s)", (n,))
                        stage(conn, self.job, {"n": n}, driver=self.env.driver)
                        if n % 5 == 0:
                            raise psycopg.Rollback()   # the application's transaction fails
                    time.sleep(self.pace_s)
        except BaseException as exc:   # seen by the test, not lost in a thread
            self.errors.append(exc)


@pytest.mark.slow
def test_jobs_are_exactly_the_committed_outbox_rows_while_relays_are_killed(daemon_env):
    env = daemon_env
    env.sql("create table {schema}.orders (n int primary key)")
    daemons = [env.start("--app", COORD, "--queue", "outboxed=2x8", XJOBS_OUTBOX_LEASE="1s")
               for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    app = App(env, pace_s=0.03)   # 2,000 transactions over several seconds of kills
    threads = [threading.Thread(target=app.run, args=(i,)) for i in range(APP_THREADS)]
    for thread in threads:
        thread.start()
    kills = 0
    while any(t.is_alive() for t in threads):
        time.sleep(1.5)
        row = relay_of(daemons[kills % 2])
        if row:
            os.kill(row["pid"], signal.SIGKILL)
            kills += 1
    for thread in threads:
        thread.join()
    assert app.errors == []
    assert kills >= 4

    wait_for(lambda: env.one("select count(*) from {schema}.outbox where published_at is null") == 0, 60,
             "every committed outbox row to be published")
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where name = 'outboxed' "
                             "and state <> 'completed'") == 0, 60, "every job to run")

    committed = {n for n in range(TRANSACTIONS) if n % 5}
    assert {n for (n,) in env.sql("select n from {schema}.orders")} == committed
    rows = env.sql("select count(*), count(distinct job_id), count(*) filter (where published_at is null) "
                   "from {schema}.outbox")
    assert rows == [(len(committed), len(committed), 0)]
    jobs = env.sql("select (payload->>'n')::int from {schema}.jobs where name = 'outboxed'")
    assert sorted(n for (n,) in jobs) == sorted(committed)          # none lost, none twice
    assert env.one("select count(distinct job_id) from {schema}.effects where name = 'outboxed'") == len(committed)
    assert env.one("select count(*) from {schema}.jobs j join {schema}.outbox o on o.job_id = j.id") == len(committed)

    restarted = sum(c["restarts"] for d in daemons for c in d.status()["children"] if c["role"] == "outbox-relay")
    assert restarted == kills
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(30) == 0


def test_an_idle_daemon_starts_a_staged_job_within_milliseconds_of_the_commit(daemon_env):
    env = daemon_env
    env.sql("create table {schema}.orders (n int primary key)")
    # no poll within the test: only the notifications can carry a staged job to its body
    daemon = env.start("--app", COORD, "--queue", "outboxed=1x4", XJOBS_POLL="10m")
    daemon.ready()
    wait_for(lambda: relay_of(daemon), 10, "the relay")
    from tests.apps.coord_app import outboxed
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        for n in range(40):
            with conn.transaction():
                stage(conn, outboxed, {"n": n}, driver=env.driver)
            wait_for(lambda: env.one("select count(*) from {schema}.effects where name = 'outboxed'") == n + 1,
                     10, f"job {n} to start")
    started = env.one("select count(*) from {schema}.outbox o join {schema}.effects e on e.job_id = o.job_id")
    assert started == 40                          # each staged row became the job that ran
    # rows the relay has not published yet are what xjobs_outbox_pending counts
    relay = relay_of(daemon)["pid"]  # type: ignore[index]
    os.kill(relay, signal.SIGSTOP)
    try:
        with psycopg.connect(env.dsn, autocommit=True) as conn, conn.transaction():
            for n in range(100, 103):
                stage(conn, outboxed, {"n": n}, driver=env.driver)
        wait_for(lambda: daemon.sample("xjobs_outbox_pending") == 3, 10, "three pending in /metrics")
        assert daemon.sample("xjobs_outbox_oldest_seconds") >= 0
    finally:
        os.kill(relay, signal.SIGCONT)
    wait_for(lambda: daemon.sample("xjobs_outbox_pending") == 0, 10, "the relay to publish them")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
