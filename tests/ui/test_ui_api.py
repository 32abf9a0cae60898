"""The dashboard's JSON under ``/api/``: every page's data, answered with the projection the
command line's ``--json`` prints. On PostgreSQL each answer is compared with ``xjobsd ... --json``
run as an operator runs it, on the same schema; on both drivers each endpoint answers what its
page reads, and refuses what it cannot answer as JSON with a stable code."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import orjson
import pytest

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

from tests.cli.commands import as_json, xjobsd_on  # noqa: E402
from tests.daemon_fixtures import DaemonEnv, free_port, wait_for  # noqa: E402
from tests.drivers.parity import claim_one, enqueue  # noqa: E402
from tests.ui.clients import Browser, client, dead_job  # noqa: E402
from xjobs import admin  # noqa: E402
from xjobs.drivers.base import ListFilter  # noqa: E402
from xjobs.drivers.postgres import PostgresDriver  # noqa: E402
from xjobs.registry import REGISTRY  # noqa: E402
from xjobs.ui.app import Dashboard  # noqa: E402
from xjobs.ui.auth import Guard  # noqa: E402
from xjobs.workers.scheduler import ELECTION  # noqa: E402

TASKS_APP = "tests.apps.tick_app"     # declares the task every_minute


def api(c, path: str, status: int = 200):
    answer = c.get(path)
    assert answer.status_code == status, (path, answer.get_data(as_text=True))
    assert answer.mimetype == "application/json"
    return orjson.loads(answer.get_data())


@pytest.fixture
def real_clock(pg_dsn, pg_schema):
    """The schema the command line reads, migrated by it, and a driver on the database's clock."""
    xjobsd_on(pg_dsn, pg_schema)("migrate")
    driver = PostgresDriver(pg_dsn, schema=pg_schema, application_name="xjobs-tests")
    yield driver
    driver.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_every_endpoint_agrees_with_the_command_line_s_json(real_clock, pg_dsn, pg_schema):
    driver, xjobsd = real_clock, xjobsd_on(pg_dsn, pg_schema)
    # no job left ready: a ready job's age grows between two reads, and nothing else moves
    for n in range(3):
        dead_job(driver, f"dead{n}", error=f"boom {n % 2}", traceback="Traceback ...\nValueError: boom")
    enqueue(driver, "run", queue="reports", tenant="globex")
    claim_one(driver, "reports")
    driver.leader_elect(ELECTION, "daemon-a", 60_000.0)
    __import__(TASKS_APP)
    every_minute = next(t for t in REGISTRY.tasks() if t.name == "every_minute")
    c = Browser(Dashboard(driver, guard=Guard(), tasks=[every_minute]))

    assert api(c, "/api/queues") == as_json(xjobsd("queues", "ls", "--json"))
    assert api(c, "/api/overview")["queues"] == as_json(xjobsd("queues", "ls", "--json"))
    assert api(c, "/api/jobs")["jobs"] == as_json(xjobsd("jobs", "ls", "--json"))
    assert api(c, "/api/jobs?state=dead&queue=default&limit=2")["jobs"] == \
        as_json(xjobsd("jobs", "ls", "--state", "dead", "--queue", "default", "--limit", "2", "--json"))
    for view in driver.job_list(ListFilter(limit=50)):
        assert api(c, f"/api/jobs/{view.id}") == as_json(xjobsd("jobs", "show", str(view.id), "--json"))
    assert api(c, "/api/dead")["jobs"] == as_json(xjobsd("jobs", "dead", "--json"))
    assert api(c, "/api/dead?limit=1")["jobs"] == as_json(xjobsd("jobs", "dead", "--limit", "1", "--json"))
    shown, printed = api(c, "/api/schedules"), as_json(xjobsd("tasks", "ls", "--app", TASKS_APP, "--json"))
    assert shown["leader"] == printed["leader"] and shown["leader"]["holder"] == "daemon-a"

    def steady(rows):   # the next fire is read from each read's own now: a minute apart at most
        return [{k: v for k, v in row.items() if not k.startswith("next_fire")} for row in rows]
    assert steady(shown["tasks"]) == steady(printed["tasks"]) and len(printed["tasks"]) == 1


def test_each_endpoint_answers_what_its_page_reads(driver):
    ids = [dead_job(driver, f"d{n}", error="timeout talking to smtp") for n in range(2)]
    ready = enqueue(driver, "ready", queue="mail")
    running = enqueue(driver, "running", queue="reports")
    claim_one(driver, "reports")
    c = client(driver)

    overview = api(c, "/api/overview")
    assert {q["name"] for q in overview["queues"]} == {"default", "mail", "reports"}
    assert overview["queues"] == admin.queues(driver) and overview["daemon"] is None
    assert len(overview["throughput"]["minutes"]) == 60 and overview["throughput"]["per_queue"] == {}
    listed = api(c, "/api/jobs?queue=mail")
    assert [j["id"] for j in listed["jobs"]] == [ready] and listed["older"] is None
    assert listed["jobs"] == admin.jobs_json(driver, driver.job_list(ListFilter(queue="mail")))
    page = api(c, "/api/jobs?limit=1")
    older = api(c, f"/api/jobs?limit=1&before={page['older']}")
    assert [page["jobs"][0]["id"], older["jobs"][0]["id"]] == [running, ready]
    job = api(c, f"/api/jobs/{ids[0]}")
    assert job == admin.job_json(driver, driver.job_get(ids[0])) and job["state"] == "dead"
    assert job["history"][0]["outcome"] == "enqueued" and job["created_at"].endswith("+00:00")
    dead = api(c, "/api/dead")
    [group] = dead["groups"]
    assert (group["count"], group["error"], group["newest_id"]) == (2, "timeout talking to smtp", ids[1])
    assert [j["id"] for j in dead["jobs"]] == ids[::-1]
    now_running = api(c, "/api/running")
    [row] = now_running["running"]
    assert (row["id"], row["claimed_by"], row["child"]) == (running, "w1", None)
    assert row["started_at"].endswith("+00:00") and now_running["older"] is None
    schedules = api(c, "/api/schedules")
    assert schedules["tasks"] == [] and schedules["outbox"]["pending"] == 0 and schedules["relay"] is None


@pytest.mark.parametrize("path, status, code", [
    ("/api/jobs?state=bogus", 400, "X_INVALID_OPTION"), ("/api/jobs?since=soon", 400, "X_INVALID_OPTION"),
    ("/api/jobs?before=abc", 400, "X_INVALID_OPTION"), ("/api/jobs?limit=0", 400, "X_INVALID_OPTION"),
    ("/api/dead?limit=1001", 400, "X_INVALID_OPTION"), ("/api/running?before=3", 400, "X_INVALID_OPTION"),
    ("/api/jobs/999", 404, "X_JOB_NOT_FOUND"), ("/api/jobs/99999999999999999999", 404, "X_JOB_NOT_FOUND"),
    ("/api/nope", 404, None)])
def test_what_cannot_be_answered_is_refused_as_json_with_its_code(memory_driver, path, status, code):
    refused = api(client(memory_driver), path, status)["error"]
    assert refused["code"] == code and refused["message"]


def test_the_api_only_reads(memory_driver):
    job_id = dead_job(memory_driver)
    answer = client(memory_driver).post(f"/api/jobs/{job_id}", data={})
    assert answer.status_code == 405 and orjson.loads(answer.get_data())["error"]["code"] is None
    assert memory_driver.job_get(job_id).state == "dead"


@pytest.mark.daemon
def test_a_daemon_s_dashboard_answers_its_children_as_xjobsd_status_does(daemon_env: DaemonEnv):
    port = free_port()
    daemon = daemon_env.start("--ui", f"127.0.0.1:{port}")
    daemon.ready()

    def fetch(path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            assert answer.headers["Content-Type"] == "application/json"
            return orjson.loads(answer.read())
    wait_for(lambda: fetch("/api/overview")["daemon"], 20, "the dashboard to reach its daemon")
    printed = subprocess.run([sys.executable, "-m", "xjobs.cli", "status", "--json", "--control", daemon.control],
                             env=daemon_env.process_env, capture_output=True, text=True, timeout=30)
    assert printed.returncode == 0, printed.stderr
    status, shown = orjson.loads(printed.stdout), fetch("/api/overview")["daemon"]

    def steady(answer):   # what the two reads share: uptimes, heartbeats and counters move on
        return sorted((c["identity"], c["role"], c["queue"], c["pid"], c["state"]) for c in answer["children"])
    assert steady(shown) == steady(status) and {c[1] for c in steady(status)} >= {"worker", "scheduler", "ui"}
    assert set(shown) == set(status) and shown["pid"] == status["pid"] == daemon.pid
    assert [sorted(c) for c in shown["children"]] == [sorted(c) for c in status["children"]]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
