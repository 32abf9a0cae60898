"""What ``jobs show`` says of a ready job that is not running: "snoozed until T" when its body
snoozed, "scheduled for T" when it is due later for any other reason, nothing once it is due;
``--json`` carries the same sentence as ``waiting``."""

from __future__ import annotations


import pytest

from tests.cli.commands import as_json
from tests.drivers.parity import claim, new_job
from xjobs.drivers.base import Nack
from xjobs.views import iso

pytestmark = pytest.mark.postgres


def waiting_line(text: str) -> str | None:
    return next((ln for ln in text.splitlines() if ln.startswith("waiting for")), None)


def test_show_says_a_ready_job_is_snoozed_or_scheduled_until_when(xjobsd, driver):
    napper = driver.job_enqueue([new_job("nap")])[0].id
    [job] = claim(driver)
    assert driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=600_000))
    later = driver.job_enqueue([new_job("later")._replace(delay_ms=3_600_000)])[0].id
    due = driver.job_enqueue([new_job("due")])[0].id
    for job_id, words in ((napper, "snoozed until"), (later, "scheduled for")):
        sentence = f"{words} {iso(driver.job_get(job_id).run_at)}"
        line = waiting_line(xjobsd("jobs", "show", str(job_id)).stdout)
        assert line is not None and line.split(None, 2)[2] == sentence
        assert as_json(xjobsd("jobs", "show", str(job_id), "--json"))["waiting"] == sentence
    assert waiting_line(xjobsd("jobs", "show", str(due)).stdout) is None
    assert as_json(xjobsd("jobs", "show", str(due), "--json"))["waiting"] is None
