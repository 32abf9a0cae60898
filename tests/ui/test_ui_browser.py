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
    if os.environ.get("XJOBS_UI_SCREENSHOT"):   # the README's picture: an hour of traffic to show
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
    expect(queue_row(page, "ui").get_by_test_id("state")).to_have_text("running")
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
