"""What ``xjobsd jobs show`` and ``jobs ls`` say of a job's life: a completed job stands in no
earlier attempt's error, an error names the application's line (never xjobs' own), and a clean
job's history tells its life from its enqueue to its completion."""

from __future__ import annotations

import pytest

from tests.cli.commands import as_json

pytestmark = pytest.mark.postgres

APP = "tests.apps.life_app"


def enqueued(xjobsd, name: str) -> int:
    xjobsd("migrate")   # an enqueue refuses a schema nothing installed
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


def test_a_clean_jobs_history_tells_its_life_in_text_and_json(xjobsd):
    job_id = enqueued(xjobsd, "clean")
    flaky = enqueued(xjobsd, "flaky")
    xjobsd("tick", "--app", APP, "--deadline", "20s", expect=1)
    shown = as_json(xjobsd("jobs", "show", str(job_id), "--json"))
    life = [(h["attempt"], h["outcome"], h["by"]) for h in shown["history"]]
    assert [outcome for _, outcome, _ in life] == ["enqueued", "started", "completed"]
    assert life[0] == (0, "enqueued", shown["enqueued_by"]) and shown["enqueued_by"]
    assert life[1] == life[2][:1] + ("started",) + life[2][2:] == (1, "started", shown["claimed_by"])
    times = [h["at"] for h in shown["history"]]
    assert times == sorted(times) and times[0] == shown["created_at"] and times[-1] == shown["finished_at"]
    text = xjobsd("jobs", "show", str(job_id)).stdout
    history = text.split("\nhistory:\n", 1)[1].splitlines()
    assert history[0].split() == ["AT", "ATTEMPT", "OUTCOME", "BY", "ERROR"]
    assert [line.split()[2:4] for line in history[1:4]] == \
        [["enqueued", shown["enqueued_by"]], ["started", shown["claimed_by"]], ["completed", shown["claimed_by"]]]
    # a retried job: its failed attempt's row, then only its latest run's start (the one known)
    again = as_json(xjobsd("jobs", "show", str(flaky), "--json"))
    assert [(h["attempt"], h["outcome"]) for h in again["history"]] == \
        [(0, "enqueued"), (1, "retried"), (2, "started"), (2, "completed")]
