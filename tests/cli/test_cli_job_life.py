"""What ``xjobsd jobs show`` and ``jobs ls`` say of a job's life: a completed job stands in no
earlier attempt's error, an error names the application's line (never xjobs' own), and a clean
job's history tells its life from its enqueue to its completion."""

from __future__ import annotations

import pytest

from tests.cli.commands import as_json

pytestmark = pytest.mark.postgres

APP = "tests.apps.life_app"


def enqueued(xjobsd, name: str) -> int:
    return as_json(xjobsd("enqueue", "--app", APP, name, "--input", '{"n": 1}', "--json"))["id"]


def test_a_job_that_completes_after_a_failure_shows_no_current_error(xjobsd):
    job_id = enqueued(xjobsd, "flaky")
    xjobsd("tick", "--app", APP, "--deadline", "20s", expect=1)   # attempt 1 failed, 2 completed
    shown = as_json(xjobsd("jobs", "show", str(job_id), "--json"))
    assert (shown["state"], shown["attempt"], shown["last_error"]) == ("completed", 2, None)
    [failed] = [h for h in shown["history"] if h["outcome"] == "retried"]
    # the attempt's error names the job's own line, not the xjobs call it was refused in
    assert failed["error"].startswith("InvalidOption: ")
    assert "life_app.py:12)" in failed["error"] and "xjobs/" not in failed["error"]
    assert "xjobs/context.py" in failed["traceback"]   # the traceback stays whole
    [row] = as_json(xjobsd("jobs", "ls", "--json"))
    assert (row["id"], row["last_error"]) == (job_id, None)
    assert "InvalidOption" not in xjobsd("jobs", "ls").stdout
