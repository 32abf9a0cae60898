"""``xjobsd mcp`` driven as an MCP client drives it: the command started as a subprocess and
spoken to over its stdin and stdout by the official SDK's client. Each tool answers what the
matching ``xjobsd ... --json`` prints on the same schema (as text and as structured content);
the writes are refused without ``--allow-writes`` and act with it; a refusal is a tool error
``X_CODE: message`` with ``{"error": {"code", "message", "hint"}}``."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import orjson
import pytest

from tests.cli.commands import ROOT, as_json
from tests.cli.test_cli_refusals import refused
from tests.drivers.parity import claim_one, enqueue
from xjobs.drivers.base import Nack
from xjobs.mcp.tools import READS, WRITES
from xjobs.workers.scheduler import ELECTION

pytest.importorskip("mcp", reason="xjobsd mcp needs the mcp extra")

from mcp import Client  # noqa: E402

from tests.cli.mcp_client import answered, refusal, with_server  # noqa: E402

pytestmark = pytest.mark.postgres
TASKS_APP = "tests.apps.tick_app"     # declares the task every_minute, on queue default


def dead_job(driver, key: str, error: str) -> int:
    job_id = enqueue(driver, key)
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", error=error))
    return job_id


def dashboard_s(driver, path: str) -> Any:
    """What the dashboard's JSON answers at ``path`` (skipped without the ui extra)."""
    pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")
    from xjobs.ui.app import Dashboard
    from xjobs.ui.auth import Guard
    from werkzeug.test import Client as WebClient
    answer = WebClient(Dashboard(driver, guard=Guard())).get(path, environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert answer.status_code == 200
    return orjson.loads(answer.get_data())


def server_env(pg_dsn: str, pg_schema: str) -> dict[str, str]:
    return {"XJOBS_DATABASE_URL": pg_dsn, "XJOBS_SCHEMA": pg_schema}


def test_every_read_tool_answers_what_the_command_line_s_json_prints(xjobsd, driver, pg_dsn, pg_schema, tmp_path):
    # no job left ready: a ready job's age grows between two reads, and nothing else moves
    dead = [dead_job(driver, f"dead{n}", f"boom {n % 2}") for n in range(3)]
    enqueue(driver, "run", queue="reports", tenant="globex")
    running = claim_one(driver, "reports").id
    driver.leader_elect(ELECTION, "daemon-a", 60_000.0)
    driver.rate_add({"default": {"completed": 40, "retried": 8, "dead": 2}, "reports": {"completed": 1}})
    app = ["--app", TASKS_APP]
    printed = {
        "queues_list": as_json(xjobsd("queues", "ls", *app, "--json")),
        "jobs_list": as_json(xjobsd("jobs", "ls", "--json")),
        "jobs_list dead": as_json(xjobsd("jobs", "ls", "--state", "dead", "--queue", "default", "--limit", "2",
                                         "--error-contains", "BOOM", "--json")),
        "jobs_show": {job_id: as_json(xjobsd("jobs", "show", str(job_id), "--json")) for job_id in (*dead, running)},
        "jobs_list older": as_json(xjobsd("jobs", "ls", "--before", str(dead[2]), "--limit", "1", "--json")),
        "jobs_dead": as_json(xjobsd("jobs", "dead", "--limit", "2", "--json")),
        "jobs_stats": as_json(xjobsd("jobs", "stats", "--json")),
        "tasks_list": as_json(xjobsd("tasks", "ls", *app, "--json")),
        "throughput": dashboard_s(driver, "/api/overview")["throughput"],
    }

    async def talk(client: Client) -> dict[str, Any]:
        listed = await client.list_tools()
        call = client.call_tool
        return {
            "tools": {tool.name: tool for tool in listed.tools},
            "queues_list": answered(await call("queues_list")),
            "jobs_list": answered(await call("jobs_list")),
            "jobs_list dead": answered(await call("jobs_list", {"state": "dead", "queue": "default", "limit": 2,
                                                                "error_contains": "BOOM"})),
            "jobs_show": {job_id: answered(await call("jobs_show", {"id": job_id})) for job_id in (*dead, running)},
            "jobs_list older": answered(await call("jobs_list", {"before": dead[2], "limit": 1})),
            "jobs_dead": answered(await call("jobs_dead", {"limit": 2})),
            "jobs_stats": answered(await call("jobs_stats")),
            "tasks_list": answered(await call("tasks_list")),
            "throughput": answered(await call("throughput")),
            "status": refusal(await call("status")),
            "missing": refusal(await call("jobs_show", {"id": 999_999})),
            "bad state": refusal(await call("jobs_list", {"state": "bogus"})),
            "bad age": refusal(await call("jobs_list", {"since": "soon"})),
            "too many": refusal(await call("jobs_dead", {"limit": 1001})),
            "no id": refusal(await call("jobs_show", {})),
            "no such tool": refusal(await call("jobs_purge", {})),
            "writes": {name: refusal(await call(name, {"id": dead[0], "name": "default"})) for name in WRITES},
        }

    got = with_server(server_env(pg_dsn, pg_schema), [*app, "--control", str(tmp_path / "none.sock")], talk)
    assert sorted(got.pop("tools")) == sorted(READS)          # the writes are not even offered
    assert set(READS) - {"status"} == {key.split()[0] for key in printed}
    tasks, shown = got.pop("tasks_list"), printed.pop("tasks_list")
    assert tasks["leader"] == shown["leader"] and tasks["leader"]["holder"] == "daemon-a"

    def steady(rows):   # the next fire is read from each read's own now: a minute apart at most
        return [{k: v for k, v in row.items() if not k.startswith("next_fire")} for row in rows]
    assert steady(tasks["tasks"]) == steady(shown["tasks"]) and len(shown["tasks"]) == 1
    rates, charted = got.pop("throughput"), printed.pop("throughput")
    # the minutes are those up to each read's own now, a moment apart: the same counts in them
    assert len(rates.pop("minutes")) == len(charted.pop("minutes")) == 60
    assert rates == charted == {"ended": 51, "failed": 10, "per_queue": {"default": {"ended": 50, "failed": 10},
                                                                          "reports": {"ended": 1, "failed": 0}}}
    for key, value in printed.items():
        assert got[key] == value, key
    # what the comparison covered
    assert [j["id"] for j in got["jobs_list dead"]] == dead[:0:-1] and got["jobs_stats"]["reports"]["running"] == 1
    assert [j["id"] for j in got["jobs_list older"]] == [dead[1]]
    assert got["jobs_show"][dead[0]]["history"][0]["outcome"] == "enqueued"

    code, message, hint = got["status"]
    assert code == "X_DAEMON_UNAVAILABLE" and "none.sock" in message
    assert got["missing"][0] == "X_JOB_NOT_FOUND"
    assert got["bad state"][:2] == ("X_INVALID_OPTION", got["bad state"][1]) and got["bad state"][1].startswith("state:")
    assert got["bad age"][0] == "X_INVALID_OPTION" and got["bad age"][1].startswith("since:")
    assert got["too many"][0] == "X_INVALID_OPTION" and got["too many"][1].startswith("limit:")
    assert got["no id"][:2] == ("X_INVALID_OPTION", "id: Field required")
    assert got["no such tool"][0] == "X_USAGE" and "jobs_stats" in got["no such tool"][1]
    for name, (code, message, hint) in got["writes"].items():
        assert (code, message) == ("X_READ_ONLY", f"{name} changes the fleet, and this server only reads"), name
        assert hint == "start it as `xjobsd mcp --allow-writes`"
    assert driver.job_get(dead[0]).state == "dead"
    assert not any(row["paused"] for row in as_json(xjobsd("queues", "ls", "--json")))


def test_with_allow_writes_the_four_writes_act_through_the_operator_s_verbs(xjobsd, driver, pg_dsn, pg_schema):
    dead = dead_job(driver, "d", "boom")
    ready = enqueue(driver, "r", queue="mail")

    async def talk(client: Client) -> dict[str, Any]:
        listed = await client.list_tools()
        call = client.call_tool
        return {
            "protocol": client.protocol_version,
            "tools": sorted(tool.name for tool in listed.tools),
            "read only": {tool.name: tool.annotations and tool.annotations.read_only_hint for tool in listed.tools},
            "misspelt": refusal(await call("queues_pause", {"name": "mial"})),
            "paused": answered(await call("queues_pause", {"name": "mail"})),
            "resumed": answered(await call("queues_resume", {"name": "mail"})),
            "retried": answered(await call("jobs_retry", {"id": dead})),
            "cancelled": answered(await call("jobs_cancel", {"id": ready, "reason": "wrong tenant"})),
            "again": refusal(await call("jobs_cancel", {"id": ready})),
            "forced": answered(await call("queues_pause", {"name": "nowhere", "force": True})),
        }

    # as a client of the handshake era talks (most do today); the reads' test talks the newest
    got = with_server(server_env(pg_dsn, pg_schema), ["--allow-writes"], talk, mode="legacy")
    assert got["tools"] == sorted(READS + WRITES) and not got["protocol"].startswith("2026")
    assert {name for name, read_only in got["read only"].items() if not read_only} == set(WRITES)
    # each answers the job as `xjobsd jobs show --json` prints it now (nothing changed it since)
    assert got["retried"] == as_json(xjobsd("jobs", "show", str(dead), "--json"))
    assert got["cancelled"] == as_json(xjobsd("jobs", "show", str(ready), "--json"))
    assert got["retried"]["state"] == "ready" and got["retried"]["history"][-1]["error"].startswith("retried by mcp:")
    assert got["cancelled"]["state"] == "cancelled" and got["cancelled"]["last_error"].endswith(": wrong tenant")
    assert got["again"][0] == "X_JOB_NOT_CANCELLABLE"
    code, message, hint = got["misspelt"]
    assert code == "X_QUEUE_UNKNOWN" and "did you mean mail?" in message
    assert got["paused"]["paused"] is True and got["paused"]["paused_by"].startswith("mcp:")
    assert got["resumed"]["paused"] is False
    assert got["forced"]["name"] == "nowhere" and got["forced"]["paused"] is True
    assert [row["name"] for row in as_json(xjobsd("queues", "ls", "--json")) if row["paused"]] == ["nowhere"]


def test_the_database_is_opened_at_the_first_tool_that_reads_it_and_its_failure_is_a_tool_error(tmp_path):
    async def talk(client: Client) -> dict[str, Any]:
        return {"stats": refusal(await client.call_tool("jobs_stats")),
                "again": refusal(await client.call_tool("jobs_show", {"id": 1})),
                "status": refusal(await client.call_tool("status"))}

    # nothing listens on port 1: the server starts all the same, and each read says why it cannot
    got = with_server({"XJOBS_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"},
                      ["--control", str(tmp_path / "none.sock")], talk)
    assert got["stats"][0] == got["again"][0] == "X_DATABASE_UNAVAILABLE"
    assert got["status"][0] == "X_DAEMON_UNAVAILABLE"


def test_without_the_sdk_the_command_is_refused_naming_the_extra(pg_dsn, pg_schema):
    blocked = "import sys; sys.modules['mcp'] = None; from xjobs.cli import main; sys.exit(main(['mcp']))"
    proc = subprocess.run([sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "XJOBS_DATABASE_URL": pg_dsn, "XJOBS_SCHEMA": pg_schema})
    assert proc.returncode == 2, proc.stderr
    code, message, hint = refused(proc)
    assert code == "X_EXTRA_MISSING" and "mcp extra" in message and hint == "pip install 'xjobsd[mcp]'"
    assert proc.stdout == ""
