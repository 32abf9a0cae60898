"""``xjobs.get`` and ``xjobsd jobs show --json``, ``xjobs.queues`` and ``xjobsd queues ls
--json``: one projection, so the same job (queue) prints the same from both."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import xjobs
from tests.cli.commands import as_json
from xjobs.errors import JobNotFound
from xjobs.registry import Registry

pytestmark = pytest.mark.postgres

APP = "tests.apps.reads_app"


def enqueued(xjobsd, name: str, input: str) -> int:
    return as_json(xjobsd("enqueue", "--app", APP, name, "--input", input, "--json"))["id"]


def test_jobs_show_json_and_xjobs_get_answer_the_same_projection(xjobsd, driver, pg_dsn):
    suspended, dead = enqueued(xjobsd, "suspends", '{"n": 1}'), enqueued(xjobsd, "dies", '{"n": 1}')
    xjobsd("tick", "--app", APP, "--deadline", "20s", "--json", expect=1)   # a job failed: exit 1
    for job_id in (suspended, dead):
        assert as_json(xjobsd("jobs", "show", str(job_id), "--json")) == xjobs.get(job_id, driver=driver)
    got = xjobs.get(suspended, driver=driver)
    # what the comparison covered: a retried attempt's traceback, steps, a sleep, ISO times
    assert got["state"] == "suspended" and got["payload"] == {"n": 1}
    assert [h["outcome"] for h in got["history"]] == ["enqueued", "retried", "started", "suspended"]
    assert "ValueError: the upstream said no" in got["history"][1]["traceback"]
    assert [(s["name"], s["state"]) for s in got["steps"]] == [("fetch", "completed"), ("cool off", "sleeping")]
    assert got["waiting_for"]["step"] == "cool off" and got["waiting_for"]["until"].endswith("+00:00")
    assert xjobs.get(dead, driver=driver)["state"] == "dead"

    async def both() -> tuple[dict, dict]:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            return await xjobs.aget(suspended, conn=conn, driver=driver), await xjobs.aget(suspended, driver=driver)
    on_conn, threaded = asyncio.run(both())
    assert on_conn == threaded == got


def test_an_unknown_id_is_refused_with_the_code_and_words_of_the_command_line(xjobsd, driver, pg_dsn):
    said = xjobsd("jobs", "show", "4242", "--json", expect=1).stderr.strip()
    with pytest.raises(JobNotFound) as refused:
        xjobs.get(4242, driver=driver)
    assert refused.value.code == "X_JOB_NOT_FOUND" and said == f"xjobsd: {refused.value}"

    async def refusals() -> list[str]:
        codes = []
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            for read in (xjobs.aget(4242, conn=conn, driver=driver), xjobs.aget(4242, driver=driver)):
                try:
                    await read
                except JobNotFound as exc:
                    codes.append(str(exc))
        return codes
    assert asyncio.run(refusals()) == [str(refused.value)] * 2


def test_queues_ls_json_and_xjobs_queues_answer_the_same_rows(xjobsd, driver):
    enqueued(xjobsd, "suspends", '{"n": 1}')
    enqueued(xjobsd, "dies", '{"n": 2}')
    xjobsd("enqueue", "--app", "tests.apps.cli_app", "greet", "--input", '{"user": "a", "org": "o"}')
    xjobsd("queues", "pause", "mail")
    printed, read = as_json(xjobsd("queues", "ls", "--json")), xjobs.queues(driver=driver, registry=Registry())
    # how long the oldest ready job has waited grows between the two reads; the rest is equal
    ages = [(p.pop("oldest_ready_seconds"), r.pop("oldest_ready_seconds")) for p, r in zip(printed, read)]
    assert printed == read
    assert [(r["name"], r["paused"], r["ready"]) for r in read] == [("mail", True, 1), ("reads", False, 2)]
    assert read[0]["paused_by"].startswith("cli:")
    for cli_age, api_age in ages:
        assert 0 < cli_age and 0 < api_age and abs(cli_age - api_age) < 30


def test_what_enqueue_answers_reads_its_job_back(driver):
    from tests.apps.reads_app import suspends
    from xjobs.enqueue import enqueue_many
    [handle] = enqueue_many(suspends, [{"n": 7}], driver=driver)
    assert isinstance(handle, xjobs.Enqueued) and not handle.deduped
    assert handle.get(driver=driver) == xjobs.get(handle.id, driver=driver)
    assert handle.get(driver=driver)["state"] == "ready"
    assert asyncio.run(handle.aget(driver=driver)) == handle.get(driver=driver)
    assert enqueue_many(suspends, [{"n": 7}], driver=driver) == [xjobs.Enqueued(handle.id, True)]
