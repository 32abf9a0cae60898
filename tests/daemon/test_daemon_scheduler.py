"""The scheduler through real daemons: two supervisors on one database, one task firing every
second for a minute while the leader is killed twice and paused past its lease once. Every
occurrence is enqueued exactly once and none is missed (checked in SQL); the paused ex-leader
dispatches nothing after it resumes. Also: maintenance runs on the leader only, and a lapsed
lease is still rescued at once after the leader's scheduler is killed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.daemon_fixtures import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

COORD = "tests.apps.coord_app"
SHORT_LEASE = {"XJOBS_LEADER_LEASE": "2s"}


def scheduler_of(daemon) -> dict | None:
    children = daemon.try_status()
    if not children:
        return None
    rows = [c for c in children["children"] if c["role"] == "scheduler" and c["pid"]]
    return rows[0] if rows else None


def leading(daemons) -> object | None:
    for daemon in daemons:
        row = scheduler_of(daemon)
        if row and row["stats"] and row["stats"].get("leader"):
            return daemon
    return None


def occurrences(env) -> list[tuple[int, int]]:
    return env.sql("select (regexp_match(idempotency_key, '^task:every_second:([0-9]+):'))[1]::bigint as at, "
                   "count(*) from {schema}.jobs where name = 'beat' group by 1 order by 1")


def by_scheduler(env, identity: str, since) -> int:
    """Jobs a scheduler child dispatched after ``since`` (a database time)."""
    return env.one("select count(*) from {schema}.jobs where enqueued_by = %s and created_at > %s",
                   f"task:every_second@{identity}", since)


# timing: a two-second leader lease must be renewed on time; a starved new leader loses it
# back to the resumed one (it failed so twice here with the machine's load average above 10)
@pytest.mark.slow
@pytest.mark.timing
def test_one_leader_fires_each_second_exactly_once_across_kills_and_a_pause(daemon_env):
    env = daemon_env
    daemons = [env.start("--app", COORD, "--queue", "beats=1x4", **SHORT_LEASE) for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    started = time.monotonic()
    leader = wait_for(lambda: leading(daemons), 10, "a leader")
    # the gauge is true on both: 1 on the leader's /metrics, 0 on the follower's
    follower = next(d for d in daemons if d is not leader)
    wait_for(lambda: leader.sample("xjobs_scheduler_leader") == 1
             and follower.sample("xjobs_scheduler_leader") == 0
             and "xjobs_scheduler_leader" in follower.metrics(), 10, "the leader gauges")

    # 1. the leader's scheduler child is killed: its supervisor restarts it, and it leads again
    wait_for(lambda: time.monotonic() - started > 8, 20, "some seconds of dispatching")
    os.kill(scheduler_of(leader)["pid"], signal.SIGKILL)  # type: ignore[index]
    wait_for(lambda: leading(daemons), 10, "a leader after the first kill")

    # 2. the leading daemon is killed outright (supervisor and children): the other takes over
    wait_for(lambda: time.monotonic() - started > 18, 20, "more seconds")
    leader = leading(daemons)
    leader.proc.kill()  # type: ignore[attr-defined]
    leader.proc.wait(10)  # type: ignore[attr-defined]
    daemons.remove(leader)
    daemons.append(env.start("--app", COORD, "--queue", "beats=1x4", **SHORT_LEASE))
    daemons[-1].ready()
    wait_for(lambda: leading(daemons), 10, "a leader after the second kill")

    # 3. the leader's scheduler is paused past its lease, then resumed: it dispatches nothing
    wait_for(lambda: time.monotonic() - started > 32, 30, "more seconds")
    leader = leading(daemons)
    paused = scheduler_of(leader)
    os.kill(paused["pid"], signal.SIGSTOP)  # type: ignore[index]
    try:
        other = next(d for d in daemons if d is not leader)
        wait_for(lambda: leading([other]), 10, "the other daemon to take over")
        took_over = env.one("select now()")
        wait_for(lambda: by_scheduler(env, scheduler_of(other)["identity"], took_over), 10,  # type: ignore[index]
                 "the new leader's first dispatch")
    finally:
        os.kill(paused["pid"], signal.SIGCONT)  # type: ignore[index]
    wait_for(lambda: (row := scheduler_of(leader)) and row["stats"]["rounds"] > paused["stats"]["rounds"] + 1,  # type: ignore[index]
             10, "the resumed scheduler to report rounds")
    resumed = scheduler_of(leader)
    assert resumed["pid"] == paused["pid"] and resumed["stats"]["leader"] == 0  # type: ignore[index]
    # nothing the paused ex-leader enqueued is newer than the takeover
    assert by_scheduler(env, paused["identity"], took_over) == 0  # type: ignore[index]

    wait_for(lambda: time.monotonic() - started > 60, 40, "a minute of occurrences")
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(30) == 0

    fired = occurrences(env)
    assert all(n == 1 for _, n in fired), [row for row in fired if row[1] != 1]
    first, last = fired[0][0], fired[-1][0]
    assert [at for at, _ in fired] == list(range(first, last + 1000, 1000)), "an occurrence was missed"
    assert len(fired) >= 55


@pytest.mark.timing
def test_maintenance_runs_on_the_leader_only_and_survives_its_scheduler_being_killed(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=4x2", "--queue", "beta=4x2", XJOBS_RESCUE="1s")
    daemon.ready()
    row = wait_for(lambda: (r := scheduler_of(daemon)) and r["stats"].get("sweeps", 0) >= 2 and r, 10,
                   "the leader's maintenance")
    assert row["stats"]["leader"] == 1
    workers = daemon.children()
    assert len(workers) == 8
    # eight queue-worker processes would otherwise sweep eight times per interval
    assert all(w["stats"]["sweeps"] == 0 for w in workers), workers
    assert daemon.sample("xjobs_scheduler_leader") == 1

    # a lease held by a worker that vanished without its supervisor knowing (another machine)
    job_id = env.enqueue_one("touch_alpha", "alpha", {"n": 1}, "a:1")
    env.sql("update {schema}.jobs set state = 'running', attempt = 1, lease_token = 7, "
            "claimed_by = 'gone', lease_expires_at = now() + interval '3 seconds' where id = %s", job_id)
    os.kill(row["pid"], signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the lapsed lease to be rescued and run")
    # expiry (3 s) + one rescue interval (1 s) + the scheduler's restart (about 1 s) + slack
    assert time.monotonic() - killed < 3 + 1 + 1 + 2
    # the new scheduler's counters reach the supervisor with its next heartbeat
    wait_for(lambda: (r := scheduler_of(daemon)) and r["pid"] != row["pid"] and r["stats"].get("rescued", 0) >= 1,
             10, "a new scheduler that counts the rescue")
    assert all(w["stats"]["sweeps"] == 0 for w in daemon.children())
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def test_the_leaders_scheduler_runs_a_due_scan_once_and_counts_it(daemon_env):
    env = daemon_env
    daemons = [env.start("--app", "tests.apps.tick_app", "--queue", "t3=1x1") for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    wait_for(lambda: env.one("select count(*) from {schema}.effects where name = 'reconcile'") == 1, 15,
             "the scan to run on the leader")
    wait_for(lambda: sum(d.sample("xjobs_jobs", "xjobs_jobs_total", job_name="reconcile", outcome="completed")
                         for d in daemons) == 1, 15, "the scan's run in /metrics")
    assert env.one("select count(*) from {schema}.scheduler_state where task = 'scan:reconcile'") == 1
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(20) == 0
    assert env.one("select count(*) from {schema}.effects where name = 'reconcile'") == 1   # hourly: once
