"""The dashboard's job page shows a completed job's result: escaped, and folded in a
``<details>`` when long; a job that did not complete shows none. It says what a member waiting
for its key waits for. A job that snoozed shows how
often, and until when."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

from tests.drivers.parity import new_job, run  # noqa: E402
from tests.ui.clients import client  # noqa: E402
from xjobs.drivers.base import Nack  # noqa: E402
from xjobs.views import iso  # noqa: E402

XSS = "<script>alert(1)</script>"


def test_the_job_page_shows_the_result_escaped_and_folds_a_long_one(driver):
    short, lease = run(driver, "short")
    long, long_lease = run(driver, "long")
    running, _ = run(driver, "running")
    driver.job_ack_many([lease, long_lease], {short: orjson.dumps({"note": XSS}),
                                              long: orjson.dumps(["row %d" % n for n in range(100)])})
    c = client(driver)
    page = c.get(f"/jobs/{short}").get_data(as_text=True)
    assert XSS not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'data-testid="result"' in page and 'data-testid="result-long"' not in page
    folded = c.get(f"/jobs/{long}").get_data(as_text=True)
    assert 'data-testid="result-long"' in folded and "row 99" in folded
    assert 'data-testid="result"' not in c.get(f"/jobs/{running}").get_data(as_text=True)


def test_the_job_page_says_what_a_keyed_member_waits_for(driver):
    members = [new_job(f"m{i}", name="post")._replace(concurrency_key="<acct>", key_cap=1)
               for i in range(2)]
    first, second = (e.id for e in driver.job_enqueue(members))
    page = client(driver).get(f"/jobs/{second}").get_data(as_text=True)
    assert f"sequence &#39;&lt;acct&gt;&#39; behind job #{first}" in page
    assert 'data-testid="key-waiting"' not in client(driver).get(f"/jobs/{first}").get_data(as_text=True)


def test_the_job_page_counts_a_jobs_snoozes(driver):
    snoozed, lease = run(driver, "snoozed")
    plain, _ = run(driver, "plain")
    driver.job_nack(Nack(snoozed, lease.token, "snoozed", delay_ms=60_000))
    c = client(driver)
    page = c.get(f"/jobs/{snoozed}").get_data(as_text=True)
    assert 'data-testid="snoozes">1 (no attempt spent)' in page
    until = driver.job_get(snoozed).run_at
    assert f'data-testid="key-waiting">snoozed until {iso(until)}' in page     # why it is not running
    assert 'data-testid="snoozes"' not in c.get(f"/jobs/{plain}").get_data(as_text=True)
