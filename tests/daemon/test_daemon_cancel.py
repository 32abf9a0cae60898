"""``xjobsd jobs cancel`` reaches a running body through the daemon's worker at once, not at
its next renewal: with the renewal minutes away, the body's ``ctx.signal`` is set by the
cancel's notification. A listen connection that was cut loses no cancel (the reopened one has
the worker check every run), and one that went silent (a half-open connection the worker
cannot tell from an idle one) leaves the cancel to the renewal, which still delivers it."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from typing import Iterator

import pytest

from tests.daemon_fixtures import CLI, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

# no renewal comes due while a test runs: what delivers a cancel is the notification
NO_RENEWAL = {"XJOBS_LEASE": "10m", "XJOBS_HEARTBEAT": "5m"}


def started(env, n: int) -> int:
    job_id = env.enqueue_one("stoppable", "slow", {"n": n}, f"stop:{n}")
    wait_for(lambda: env.one("select count(*) from {schema}.effects where job_id = %s", job_id), 20,
             f"job {job_id}'s body to start")
    return job_id


def cancel(env, *args: str) -> str:
    done = subprocess.run(CLI + ["jobs", "cancel", *args], cwd=env.tmp, env=env.process_env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def heard(env, job_id: int) -> str:
    """What the body of ``job_id`` recorded once its signal was set."""
    return wait_for(lambda: env.sql("select name from {schema}.effects where job_id = %s and name like 'stopped:%%'",
                                    job_id), 30, f"job {job_id}'s body to see its signal")[0][0]


def listen_backend(env) -> int:
    """The pid of the worker's listen session (its last statement LISTENed on the cancel channel)."""
    [[pid]] = wait_for(lambda: env.sql("select pid from pg_stat_activity where query = %s",
                                       f'listen "{env.driver.database.cancel_channel}"'), 10,
                       "the worker's listen session")
    return pid


def test_jobs_cancel_reaches_the_running_body_with_no_renewal_due(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x4", **NO_RENEWAL)
    daemon.ready()
    one, two, three = started(env, 1), started(env, 2), started(env, 3)
    cancel(env, str(one))
    assert heard(env, one) == "stopped: X_JOB_CANCELLED"
    assert cancel(env, "--queue", "slow", "--state", "running").strip() == "2 job(s) cancelled in 1 batch(es)"
    assert heard(env, two) == heard(env, three) == "stopped: X_JOB_CANCELLED"
    wait_for(lambda: daemon.children("slow")[0]["in_flight"] == 0, 10, "the worker to let go of the runs")
    assert {env.driver.job_get(i).state for i in (one, two, three)} == {"cancelled"}
    wait_for(lambda: daemon.sample("xjobs_jobs", "xjobs_jobs_total", queue="slow", outcome="cancelled") == 3,
             10, "the three cancels counted")
    assert daemon.sample("xjobs_lease_lost", "xjobs_lease_lost_total", queue="slow") == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


def test_a_cut_listen_connection_loses_no_cancel(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2", **NO_RENEWAL)
    daemon.ready()
    job_id = started(env, 1)
    cut = listen_backend(env)
    env.sql("select pg_terminate_backend(%s)", cut)
    cancel(env, str(job_id))    # most likely before the worker listens again, a second later
    assert heard(env, job_id) == "stopped: X_JOB_CANCELLED"
    assert wait_for(lambda: listen_backend(env) != cut, 10, "the worker to listen again")
    later = started(env, 2)
    cancel(env, str(later))
    assert heard(env, later) == "stopped: X_JOB_CANCELLED"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0


@contextmanager
def stopped_backend(pid: int) -> Iterator[None]:
    """The server process of one session, stopped: its client sees an open, silent connection."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            local = b"postgres" in f.read()
        if local:
            os.kill(pid, signal.SIGSTOP)
    except OSError:
        local = False
    if not local:
        pytest.skip("the server's processes are not this machine's to stop")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_cancel_the_worker_never_hears_is_delivered_by_the_renewal(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "slow=1x2", XJOBS_LEASE="6s", XJOBS_HEARTBEAT="1s")
    daemon.ready()
    job_id = started(env, 1)
    with stopped_backend(listen_backend(env)):
        cancel(env, str(job_id))
        assert heard(env, job_id) == "stopped: X_JOB_CANCELLED"
    # the notification arrives late, for a run already let go of; the worker carries on
    later = started(env, 2)
    cancel(env, str(later))
    assert heard(env, later) == "stopped: X_JOB_CANCELLED"
    assert daemon.sample("xjobs_lease_lost", "xjobs_lease_lost_total", queue="slow") == 0
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
