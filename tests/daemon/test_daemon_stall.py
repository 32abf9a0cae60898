"""xjobsd while the database stalls: a locked jobs table, idle HTTP clients, a supervisor gone.

The stall is real (an ACCESS EXCLUSIVE lock on the jobs table held by the test), and every
check is made from outside: the control socket, HTTP, ``/proc`` and ``pg_stat_activity``.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

from tests.daemon_fixtures import alive, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def started(env, job_id: int) -> list[tuple]:
    return env.sql("select attempt, pid from {schema}.effects where job_id = %s order by at", job_id)


@pytest.mark.slow
@pytest.mark.timing
def test_a_stall_longer_than_the_silence_window_but_shorter_than_a_lease_kills_no_child(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2", "--queue", "alpha=1x2")
    daemon.ready()
    job_id = env.enqueue_one("hold", "slow", {"n": 1, "seconds": 14, "watch": False}, "hold:1")
    wait_for(lambda: started(env, job_id), 10, "the job to start")
    before = {c["queue"]: c["pid"] for c in daemon.children()}

    with env.jobs_table_locked(hold_s=13):
        wait_for(lambda: env.backends("application_name like 'worker:%%' and wait_event_type = 'Lock'"),
                 10, "a worker to wait on the lock")
        stall_ends = time.monotonic() + 12.0   # past the 10 s silence window, inside the 30 s lease
        while time.monotonic() < stall_ends:
            asked = time.monotonic()
            code, _ = daemon.http("/healthz")
            assert code == 200 and time.monotonic() - asked < 1.0, "/healthz stalled with the database"
            kids = daemon.children()
            assert {c["queue"]: c["pid"] for c in kids} == before, daemon.output()
            assert all(c["restarts"] == 0 for c in kids)
            time.sleep(0.5)   # pacing the observation, not waiting for anything

    wait_for(lambda: env.job(job_id)["state"] == "completed", 30, "the job to finish after the stall")
    assert [pid for _, pid in started(env, job_id)] == [before["slow"]]   # one run, never handed back
    assert {c["queue"]: c["pid"] for c in daemon.children()} == before
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


@pytest.mark.timing
def test_a_child_is_restarted_within_seconds_while_the_jobs_table_is_locked(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2")
    daemon.ready()
    victim = daemon.children()[0]["pid"]
    with env.jobs_table_locked(hold_s=20):
        wait_for(lambda: env.backends("application_name = 'xjobsd-supervisor' and wait_event_type = 'Lock'"),
                 10, "the supervisor's statistics round to wait on the lock")
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)

        def replaced():
            kid = daemon.children()[0]
            return kid["pid"] not in (None, victim)
        wait_for(replaced, 10, "a new child")
        assert time.monotonic() - killed < 5.0, "the fork waited for the stalled round"
    daemon.ready()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


@pytest.mark.timing
def test_idle_http_clients_never_hold_up_a_restart(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2")
    daemon.ready()
    stop = threading.Event()

    def idle_client() -> None:   # connects and says nothing, over and over (a stuck scraper)
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", daemon.port), timeout=5):
                    stop.wait(2.5)
            except OSError:
                stop.wait(0.05)
    clients = [threading.Thread(target=idle_client, daemon=True) for _ in range(3)]
    for thread in clients:
        thread.start()
    try:
        wait_for(lambda: _established(daemon.port) >= 3, 5,
                 "three idle connections to the metrics port")
        victim = daemon.children()[0]["pid"]
        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: daemon.children()[0]["pid"] not in (None, victim), 10, "a new child")
        assert time.monotonic() - killed < 2.0
    finally:
        stop.set()
        for thread in clients:
            thread.join(5)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def _established(port: int) -> int:
    """Client-side TCP connections to 127.0.0.1:``port`` in ESTABLISHED state (``/proc/net/tcp``)."""
    target = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return sum(1 for line in f.readlines()[1:]
                   if line.split()[2] == target and line.split()[3] == "01")


@pytest.mark.timing
def test_a_child_blocked_in_a_database_call_does_not_outlive_its_supervisor(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2", "--queue", "beta=1x2")
    daemon.ready()
    pids = [c["pid"] for c in daemon.children()]
    with env.jobs_table_locked(hold_s=20):
        wait_for(lambda: len(env.backends("application_name like 'worker:%%' and wait_event_type = 'Lock'")) >= 2,
                 10, "both workers to wait on the lock")
        killed = time.monotonic()
        daemon.signal(signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid in pids), 10, "every child to exit")
        assert time.monotonic() - killed < 3.5, "an orphan waited for its statement"
    daemon.child_pids.update(pids)
