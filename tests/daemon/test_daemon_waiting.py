"""Why jobs wait, counted by reason, is one set of numbers on every surface of a running
daemon: ``/metrics`` (``xjobs_queue_waiting_jobs``), ``xjobsd status``, ``xjobsd queues ls``
(text and ``--json``) and the dashboard's queue table, served by its ``ui`` child."""

from __future__ import annotations

import re
import signal
import subprocess
import urllib.request

import orjson
import pytest

from tests.daemon_fixtures import CLI, free_port, wait_for
from tests.drivers.parity import claim_one, new_job
from xjobs.drivers.base import Nack
from xjobs.drivers.records import WAITING_REASONS

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]
HOUR = 3_600_000.0
EXPECTED = {"key": 1, "sequence": 2, "rate": 1, "snoozed": 1, "scheduled": 2}


def cli(env, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(CLI + list(args), cwd=env.tmp, env=env.process_env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done


def dashboard_row(port: int, queue: str) -> dict[str, int]:
    """The reasons and counts the overview's row of ``queue`` shows in its waiting cell."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
        page = answer.read().decode()
    row = page.split(f'<tr data-queue="{queue}">', 1)[1].split("</tr>", 1)[0]
    cell = row.split('data-testid="waiting">', 1)[1].split("</td>", 1)[0]
    # each count says its reason, and what the reason means where one points at it
    return {reason: int(n) for reason, n, again in
            re.findall(r'<span data-reason="(\w+)" title="[^"]+">(\d+) (\w+)</span>', cell) if reason == again}


def test_every_surface_counts_the_waiting_jobs_alike(daemon_env):
    pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")
    env, driver = daemon_env, daemon_env.driver
    port = free_port()
    # "held" is served by no worker of this daemon, so nothing the test sets up is claimed
    daemon = env.start("--queue", "alpha=1x2", "--ui", f"127.0.0.1:{port}", XJOBS_STATS_INTERVAL="200ms")
    daemon.ready()
    for queue in ("held", "naps"):                              # one snoozer each, put back for an hour
        driver.job_enqueue([new_job(f"napper-{queue}", queue=queue)])
        napper = claim_one(driver, queue)
        assert driver.job_nack(Nack(napper.id, napper.token, "snoozed", delay_ms=HOUR))
    members = [new_job(f"m{i}", name="sync", queue="held")._replace(concurrency_key="acct", key_cap=2)
               for i in range(3)]
    sequence = [new_job(f"s{i}", name="sync", queue="held")._replace(concurrency_key="seq", key_cap=1)
                for i in range(3)]
    driver.job_enqueue(members + sequence)                       # 1 waits for its key, 2 for their turn
    later = driver.clock_now_ms() + HOUR
    driver.job_enqueue([new_job("later", queue="held", run_at_ms=later),
                        new_job("later-too", queue="held", run_at_ms=later),
                        new_job("rated", queue="held", run_at_ms=later)._replace(rate_key="r")])

    def metrics() -> dict[str, int]:
        return {reason: int(daemon.sample("xjobs_queue_waiting_jobs", queue="held", reason=reason))
                for reason in WAITING_REASONS}
    wait_for(lambda: metrics() == EXPECTED, 15, "/metrics to count the waiting jobs of held")
    wait_for(lambda: daemon.status()["queues"]["held"]["waiting"] == EXPECTED, 15, "status to count them")
    [row] = [r for r in orjson.loads(cli(env, "queues", "ls", "--json").stdout) if r["name"] == "held"]
    assert row["waiting"] == EXPECTED
    [naps] = [r for r in orjson.loads(cli(env, "queues", "ls", "--json").stdout) if r["name"] == "naps"]
    assert naps["waiting"] == {**dict.fromkeys(WAITING_REASONS, 0), "snoozed": 1}   # every reason, 0 too
    table = cli(env, "queues", "ls").stdout.splitlines()
    assert table[0].split()[-1] == "WAITING"
    said = "1 key, 2 sequence, 1 rate, 1 snoozed, 2 scheduled"
    assert next(line for line in table if line.startswith("held ")).endswith(said)
    status_table = cli(env, "status", "--control", daemon.control).stdout.splitlines()
    assert next(line for line in status_table if line.startswith("held ")).rstrip().endswith(said)
    wait_for(lambda: dashboard_row(port, "held") == EXPECTED, 15, "the dashboard to show them")
    assert dashboard_row(port, "naps") == {"snoozed": 1}
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
