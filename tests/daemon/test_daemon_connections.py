"""The connection budget, as an operator counts it: every server session of one ``xjobsd``,
found in ``pg_stat_activity`` by the daemon's own processes, sampled while 256 slots run
step jobs. A worker process holds the same few sessions whatever its slot count
(``docs/production/database.md#connections``)."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from tests.daemon_fixtures import Daemon, DaemonEnv, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.steps_app"
PROCESSES, SLOTS, JOBS = 2, 128, 1536   # six rounds of every slot: the stats see them full
# the stated budget: a worker process's 2 verbs + 2 steps + 1 LISTEN, and the daemon's whole
# (its workers, the scheduler's 1, the relay's 2 + LISTEN, the supervisor's 1)
PER_WORKER = 5
PER_DAEMON = PROCESSES * PER_WORKER + 1 + 3 + 1


def _socket_ports() -> dict[int, int]:
    """socket inode -> local TCP port, for every TCP socket of this machine."""
    ports: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            ports[int(fields[9])] = int(fields[1].rsplit(":", 1)[1], 16)
    return ports


def _process_ports(pids: set[int]) -> dict[int, int]:
    """local TCP port -> the pid of ``pids`` whose socket it is."""
    ports = _socket_ports()
    found: dict[int, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except FileNotFoundError:
                continue
            if link.startswith("socket:[") and int(link[8:-1]) in ports:
                found[ports[int(link[8:-1])]] = pid
    return found


def _sessions(env: DaemonEnv, pids: set[int]) -> Counter[int]:
    """pid -> the server sessions it holds now."""
    clients = env.sql("select client_port from pg_stat_activity where datname = current_database() "
                      "and client_port > 0 and pid <> pg_backend_pid()")
    owners = _process_ports(pids)
    return Counter(owners[port] for (port,) in clients if port in owners)


def _roles(daemon: Daemon) -> dict[int, str]:
    """pid -> role of every process of the daemon, as its status names them now."""
    return {daemon.pid: "supervisor", **{c["pid"]: c["role"] for c in daemon.status()["children"] if c["pid"]}}


def test_a_worker_process_holds_a_fixed_few_sessions_whatever_its_slots_steps_included(daemon_env):
    env = daemon_env
    if not env.sql("select 1 from pg_stat_activity where pid = pg_backend_pid() and client_port > 0"):
        pytest.skip("sessions reach the server over a Unix socket: they cannot be told apart by port")
    daemon = env.start("--app", APP, "--queue", f"steps={PROCESSES}x{SLOTS}")
    daemon.ready()
    roles = _roles(daemon)
    workers = {pid for pid, role in roles.items() if role == "worker"}
    env.enqueue("three_steps", "steps", [{"n": n} for n in range(JOBS)], key=lambda i: f"three:{i['n']}")
    peak_daemon, peak_in_flight, peaks = 0, 0, Counter[int]()

    def sample() -> bool:
        nonlocal peak_daemon, peak_in_flight
        held = _sessions(env, set(roles))
        peak_daemon = max(peak_daemon, sum(held.values()))
        for pid, n in held.items():
            peaks[pid] = max(peaks[pid], n)
        peak_in_flight = max(peak_in_flight, sum(c["in_flight"] for c in daemon.children("steps")))
        return env.one("select count(*) from {schema}.jobs where state = 'completed'") == JOBS

    wait_for(sample, 120, "every step job to complete", every=0.02)
    peak_worker = max(peaks[pid] for pid in workers)
    print(f"\n{PROCESSES}x{SLOTS} step jobs: peak {peak_in_flight} in flight, sessions at most "
          f"{peak_daemon} for the whole daemon; per process: "
          + ", ".join(f"{roles[pid]} {n}" for pid, n in sorted(peaks.items(), key=lambda p: roles[p[0]])))
    assert peak_in_flight >= SLOTS, "the slots never filled: the budget was not put under load"
    assert 0 < peak_worker <= PER_WORKER
    assert peak_daemon <= PER_DAEMON
    assert all(c["restarts"] == 0 for c in daemon.status()["children"]), "a process escaped the count"
    assert env.one("select count(*) from {schema}.job_steps where state = 'completed'") == 3 * JOBS
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
