"""The dashboard in a real headless Chromium, served by a running ``xjobsd run --ui``.

Playwright drives the distribution's Chromium (``/usr/bin/chromium``: browsers cannot be
downloaded here); without a browser, or without Playwright, every test here is skipped and
says why. Each wait is Playwright's own expectation with a timeout, never a sleep.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tests.daemon_fixtures import DaemonEnv, free_port, wait_for

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[dev]')")
pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")
expect = sync_api.expect

CHROMIUM = os.environ.get("XJOBS_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if not CHROMIUM:
    pytest.skip("no Chromium on this machine (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.daemon, pytest.mark.postgres, pytest.mark.browser]
TOKEN = "a long dashboard token for the tests"
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def ui(daemon_env: DaemonEnv) -> Iterator[tuple[DaemonEnv, str]]:
    port = free_port()
    daemon = daemon_env.start("--app", "tests.apps.ui_app", "--queue", "ui=1x4", "--ui", f"127.0.0.1:{port}",
                              "--ui-actions", XJOBS_UI_TOKEN=TOKEN)
    daemon.ready()
    yield daemon_env, f"http://127.0.0.1:{port}"


@pytest.fixture
def page(browser, ui):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))  # type: ignore[func-returns-value]
    page.dialogs = dialogs
    yield page
    context.close()


def sign_in(page, base: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    expect(page.get_by_test_id("who")).to_contain_text("ui:session@127.0.0.1")


def queue_row(page, name: str):
    return page.locator(f'tr[data-queue="{name}"]')


def test_the_overview_shows_a_queue_depth_change_after_an_enqueue(page, ui):
    env, base = ui
    page.goto(base)
    expect(page.get_by_test_id("children")).to_contain_text("worker")
    expect(page.get_by_test_id("children")).to_contain_text("ui")
    for k in range(3):
        env.enqueue_one("parked", "parked", {"k": k}, key=str(k))
    # the overview refreshes itself: no reload
    expect(queue_row(page, "parked").get_by_test_id("depth")).to_have_text("3")
    if os.environ.get("XJOBS_UI_SCREENSHOT"):   # the dashboard page's picture: an hour of traffic to show
        env.sql("""insert into {schema}.job_rates (queue, minute, outcome, n)
                   select q, date_trunc('minute', now()) - m * interval '1 minute', o,
                          (case o when 'completed' then 900 + 400 * sin(m / 7.0) + 60 * random()
                                  else 10 + 30 * random() * (m between 20 and 26)::int end)::int8
                   from generate_series(1, 59) m, unnest(array['ui', 'parked']) q,
                        unnest(array['completed', 'retried']) o""")
        for k in range(40):
            env.enqueue_one("echo", "ui", {"k": f"shot{k}"}, key=f"shot{k}")
        page.reload()
        expect(queue_row(page, "ui").get_by_test_id("depth")).to_have_text("0")
        page.screenshot(path=str(SCREENSHOT), full_page=True)


def test_jobs_are_filtered_and_one_is_opened(page, ui):
    env, base = ui
    ids = [env.enqueue_one("parked", "parked", {"k": k}, key=f"p{k}") for k in range(3)]
    echo = env.enqueue_one("echo", "ui", {"k": "e", "say": "hello"}, key="e")
    page.goto(f"{base}/jobs")
    page.fill("input[name=name]", "parked")
    page.click("form[data-testid=filters] button[type=submit]")
    rows = page.locator("table[data-testid=jobs] tbody tr[data-job]")
    expect(rows).to_have_count(3)
    assert sorted(int(r.get_attribute("data-job")) for r in rows.all()) == sorted(ids)
    page.goto(f"{base}/jobs?state=completed")
    page.locator(f'tr[data-job="{echo}"] a').click()
    expect(page.get_by_test_id("job-state")).to_have_text("completed")
    expect(page.get_by_test_id("payload")).to_contain_text('"say": "hello"')


def test_a_dead_job_is_retried_from_its_page_and_runs(page, ui, tmp_path):
    env, base = ui
    flag = tmp_path / "flag"
    flag.write_text("up")
    job_id = env.enqueue_one("flagged", "ui", {"k": "f", "flag": str(flag)}, key="f", max_attempts=1)
    wait_for(lambda: env.job(job_id)["state"] == "dead", 15, "the job to die")
    sign_in(page, base)
    page.goto(f"{base}/dead")
    expect(page.get_by_test_id("dead-groups")).to_contain_text("the flag")
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.get_by_test_id("history")).to_contain_text("RuntimeError")
    trace = page.get_by_test_id("traceback")                 # collapsed to the error's first line
    expect(trace.locator("summary")).to_contain_text(f"RuntimeError: the flag {flag} is up")
    expect(trace.locator("pre")).to_be_hidden()
    trace.locator("summary").click()
    expect(trace.locator("pre")).to_contain_text("Traceback (most recent call last)")
    expect(trace.locator("pre")).to_be_visible()
    flag.unlink()
    page.get_by_test_id("retry").click()
    expect(page.get_by_test_id("flash")).to_contain_text(f"Job {job_id} is ready again")
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the retried job to run")
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text("completed")
    expect(page.get_by_test_id("history")).to_contain_text("retried by ui:session@127.0.0.1")


def test_a_running_job_is_cancelled_from_its_page(page, ui):
    env, base = ui
    job_id = env.enqueue_one("waits", "ui", {"k": "w"}, key="w")
    # the worker writes progress on its own schedule: wait for it to be in the database
    wait_for(lambda: env.driver.job_get(job_id).progress is not None, 15, "the job to report progress")
    sign_in(page, base)
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.get_by_test_id("progress")).to_contain_text("waiting to be cancelled")
    page.fill("input[name=reason]", "not needed")
    page.get_by_test_id("cancel").click()      # asks first (accepted by the page fixture)
    expect(page.get_by_test_id("job-state")).to_have_text("cancelled")
    assert page.dialogs == [f"Cancel job {job_id}?"]
    expect(page.get_by_test_id("history")).to_contain_text("cancelled by ui:session@127.0.0.1: not needed")


def test_a_queue_is_paused_and_resumed(page, ui):
    env, base = ui
    sign_in(page, base)
    page.goto(base)
    queue_row(page, "ui").get_by_test_id("pause").click()
    expect(queue_row(page, "ui").get_by_test_id("state")).to_contain_text("paused by ui:session@127.0.0.1")
    job_id = env.enqueue_one("echo", "ui", {"k": "p"}, key="p")
    expect(queue_row(page, "ui").get_by_test_id("depth")).to_have_text("1")   # nobody claims it
    assert env.job(job_id)["state"] == "ready"
    queue_row(page, "ui").get_by_test_id("resume").click()
    expect(queue_row(page, "ui").get_by_test_id("state")).to_have_text("active")   # as `queues ls` says
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the job to run once resumed")


def test_an_unauthenticated_action_is_refused(page, ui):
    env, base = ui
    job_id = env.enqueue_one("parked", "parked", {"k": "u"}, key="u")
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.get_by_test_id("cancel")).to_have_count(0)        # no button for who is not signed in
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "xjobs_ui_csrf")
    refused = page.request.post(f"{base}/jobs/{job_id}/cancel", form={"csrf": csrf})
    assert refused.status == 401
    forged = page.request.post(f"{base}/jobs/{job_id}/cancel", form={"csrf": "forged"},
                               headers={"Authorization": "Bearer not-the-token"})
    assert forged.status == 403
    assert env.job(job_id)["state"] == "ready"


def test_an_xss_payload_is_shown_as_text(page, ui):
    env, base = ui
    script = "<script>alert(1)</script>"
    job_id = env.enqueue_one("parked", "parked", {"k": script, "html": f"<img src=x onerror=alert(2)>{script}"},
                             key=script)
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.get_by_test_id("payload")).to_contain_text(script)
    page.goto(f"{base}/jobs?name=parked")
    expect(page.locator(f'tr[data-job="{job_id}"]')).to_be_visible()
    expect(page.locator(f'tr[data-job="{job_id}"]')).to_contain_text("parked")
    page.goto(f"{base}/jobs/{job_id}")
    expect(page.get_by_test_id("payload")).to_contain_text("<img src=x onerror=alert(2)>")
    assert page.locator("img").count() == 0                    # nothing the job carries became markup
    assert page.locator("script:not([src])").count() == 0
    assert page.dialogs == []


def test_running_now_names_each_run_and_its_child_and_fills_in_place(page, ui):
    env, base = ui
    page.goto(base)
    page.get_by_test_id("running-all").click()              # the overview's Running header
    expect(page).to_have_url(f"{base}/running")
    expect(page.get_by_test_id("running")).to_contain_text("Nothing is running right now")
    ids = [env.enqueue_one("waits", "ui", {"k": f"r{k}"}, key=f"r{k}") for k in range(2)]
    rows = page.locator("table[data-testid=running] tr[data-job]")
    expect(rows).to_have_count(2)                            # no reload: the page refreshes itself
    assert [int(r.get_attribute("data-job") or 0) for r in rows.all()] == ids[::-1]   # newest started first
    [child] = env.daemons[-1].children(queue="ui")
    for row in rows.all():
        expect(row.get_by_test_id("worker")).to_contain_text(f"worker ui #{child['index']} pid {child['pid']}")
        expect(row.get_by_test_id("worker")).to_contain_text(child["identity"])
        expect(row.get_by_test_id("progress")).to_contain_text("1/3 · waiting to be cancelled")
        expect(row.locator("progress")).to_have_count(1)
        expect(row.get_by_test_id("started")).to_contain_text("s ago")
    page.goto(base)
    queue_row(page, "ui").get_by_test_id("running").locator("a").click()   # a queue's running count
    expect(page).to_have_url(f"{base}/running?queue=ui")
    expect(rows).to_have_count(2)
    page.fill("input[name=queue]", "parked")
    page.click("form[data-testid=running-filter] button[type=submit]")
    expect(page.get_by_test_id("running")).to_contain_text("Nothing is running in queue parked")


def test_the_chart_draws_only_the_minutes_in_which_runs_ended(page, ui):
    env, base = ui
    page.goto(base)
    expect(page.get_by_test_id("chart-empty")).to_have_text("No run ended in this hour.")
    chart = page.locator("svg[data-testid=chart]")
    expect(chart.locator("rect")).to_have_count(0)
    expect(chart.locator("polyline")).to_have_count(0)
    env.sql("""insert into {schema}.job_rates (queue, minute, outcome, n)
               select 'ui', date_trunc('minute', now()) - m * interval '1 minute', o, n
               from (values (30, 'completed', 10), (29, 'completed', 10), (29, 'dead', 5),
                            (10, 'completed', 4)) v(m, o, n)""")
    expect(chart.locator("rect.ended")).to_have_count(3)    # refreshed in place
    expect(chart.locator("rect.failed")).to_have_count(1)
    expect(chart.locator("polyline")).to_have_count(1)      # minutes 30 and 29, then a gap
    expect(chart.locator("circle")).to_have_count(1)        # minute 10 alone
    expect(page.get_by_test_id("chart-empty")).to_have_count(0)
    heights = chart.locator("rect").evaluate_all("rects => rects.map(r => r.getBBox().height)")
    assert len(heights) == 4 and min(heights) > 0
