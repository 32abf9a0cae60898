"""A job's result on the command line: ``xjobsd jobs show`` prints a completed job's result as
JSON (``null`` for a body that returned None, a long one clipped), ``--json`` carries it whole,
as ``xjobs.get`` answers it and ``xjobs.result`` returns it."""

from __future__ import annotations

import pytest

import xjobs
from tests.cli.commands import as_json

pytestmark = pytest.mark.postgres

APP = "tests.apps.reads_app"


def enqueued(xjobsd, name: str, input: str) -> int:
    return as_json(xjobsd("enqueue", "--app", APP, name, "--input", input, "--json"))["id"]


def test_jobs_show_prints_the_result_and_json_carries_it_whole(xjobsd, driver):
    short, long = enqueued(xjobsd, "answers", '{"n": 1}'), enqueued(xjobsd, "answers", '{"n": 2, "long": 60}')
    dead = enqueued(xjobsd, "dies", '{"n": 1}')
    xjobsd("tick", "--app", APP, "--deadline", "20s", "--json", expect=1)   # a job failed: exit 1
    expected = {"n": 1, "words": [], "html": "<b>bold</b>"}
    assert xjobs.result(short, 0, driver=driver) == expected
    shown = as_json(xjobsd("jobs", "show", str(short), "--json"))
    assert shown["result"] == expected == xjobs.get(short, driver=driver)["result"]
    lines = {line.split()[0]: line for line in xjobsd("jobs", "show", str(short)).stdout.splitlines() if line.strip()}
    assert lines["result"].split(None, 1)[1] == '{"n":1,"html":"<b>bold</b>","words":[]}'   # jsonb's key order
    text = xjobsd("jobs", "show", str(long)).stdout
    [clipped] = [line for line in text.splitlines() if line.startswith("result")]
    assert "characters; --json shows all" in clipped and len(clipped) < 2100
    assert len(as_json(xjobsd("jobs", "show", str(long), "--json"))["result"]["words"]) == 60
    # a job that did not complete has no result line, and its JSON says null
    assert not [line for line in xjobsd("jobs", "show", str(dead)).stdout.splitlines() if line.startswith("result")]
    assert as_json(xjobsd("jobs", "show", str(dead), "--json"))["result"] is None
