"""The dashboard's web layer, driven through werkzeug's test client: every page renders, input
is escaped and checked, listings page by keyset, and no action happens without the switch,
a signed-in operator and our own form's CSRF token. The browser tests (test_ui_browser.py)
drive the same pages in Chromium against a running daemon."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

from tests.drivers.parity import claim_one, enqueue  # noqa: E402
from tests.ui.clients import TOKEN, Browser, client, csrf_of, dead_job, signed_in  # noqa: E402
from xjobs.errors import DatabaseTimeout  # noqa: E402
from xjobs.ui.app import Dashboard  # noqa: E402
from xjobs.ui.auth import SESSION_COOKIE, Guard  # noqa: E402

XSS = "<script>alert(1)</script>"


def test_every_page_renders_and_escapes_what_jobs_carry(driver):
    job_id = enqueue(driver, XSS, payload={"note": XSS}, tenant=XSS)
    dead_job(driver, "k2", error=XSS)
    c = client(driver)
    claim_one(driver)                                   # a running job, for /running
    for path in ("/", "/jobs", f"/jobs/{job_id}", "/dead", "/schedules", f"/jobs?name=send&error={XSS}",
                 "/running", f"/running?queue={XSS}"):
        page = c.get(path)
        assert page.status_code == 200, path
        html = page.get_data(as_text=True)
        assert XSS not in html, path
        assert "Content-Security-Policy" in page.headers and page.headers["X-Frame-Options"] == "DENY"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in c.get(f"/jobs/{job_id}").get_data(as_text=True)


def test_jobs_page_by_keyset_newest_first(driver):
    ids = [enqueue(driver, f"k{i}") for i in range(120)]
    c = client(driver)
    first = c.get("/jobs?queue=default").get_data(as_text=True)
    shown = [int(i) for i in re.findall(r'data-job="(\d+)"', first)]
    assert shown == sorted(ids, reverse=True)[:50]
    older = re.search(r'href="(/jobs\?[^"]*before=(\d+)[^"]*)"', first)
    assert older and int(older.group(2)) == shown[-1]
    second = c.get(older.group(1).replace("&amp;", "&")).get_data(as_text=True)
    assert [int(i) for i in re.findall(r'data-job="(\d+)"', second)] == sorted(ids, reverse=True)[50:100]


@pytest.mark.parametrize("query, needle", [
    ("since=soon", "X_INVALID_OPTION"), ("state=bogus", "X_INVALID_OPTION"),
    ("before=abc", "before must be a job id"), ("until=2026-01-01T00:00", "time zone")])
def test_bad_filters_are_refused_with_their_reason(memory_driver, query, needle):
    page = client(memory_driver).get(f"/jobs?{query}")
    assert page.status_code == 400 and needle in page.get_data(as_text=True)


def test_unknown_pages_and_jobs_are_404(memory_driver):
    c = client(memory_driver)
    assert c.get("/jobs/999").status_code == 404
    assert c.get("/nope").status_code == 404
    assert c.get("/static/../app.py").status_code == 404
    assert c.get("/static/xjobs.css").status_code == 200


def test_a_read_only_dashboard_refuses_every_action_and_shows_none(memory_driver):
    job_id = dead_job(memory_driver)
    c = client(memory_driver, actions=False)
    csrf = csrf_of(c)
    assert 'data-testid="retry"' not in c.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert c.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}).status_code == 403
    assert c.post("/login", data={"token": TOKEN, "csrf": csrf}).status_code == 403
    assert memory_driver.job_get(job_id).state == "dead"


def test_an_action_needs_a_signed_in_operator_and_our_own_form(memory_driver):
    job_id = dead_job(memory_driver)
    c = client(memory_driver)
    csrf = csrf_of(c)
    assert c.post(f"/jobs/{job_id}/retry", data={"csrf": csrf}).status_code == 401      # nobody signed in
    assert c.post("/login", data={"token": "wrong", "csrf": csrf}).status_code == 401
    c, csrf = signed_in(memory_driver)
    assert c.post(f"/jobs/{job_id}/retry", data={}).status_code == 403                  # no CSRF token
    assert c.post(f"/jobs/{job_id}/retry", data={"csrf": "x" * 43}).status_code == 403  # a forged one
    assert c.post(f"/jobs/{job_id}/retry", data={"csrf": csrf},
                  headers={"Origin": "http://evil.example"}).status_code == 403
    assert c.post(f"/jobs/{job_id}/retry", data={"csrf": csrf},
                  headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert memory_driver.job_get(job_id).state == "dead"
    done = c.post(f"/jobs/{job_id}/retry", data={"csrf": csrf})
    assert done.status_code == 303
    view = memory_driver.job_get(job_id)
    assert view.state == "ready" and view.history[-1]["error"] == "retried by ui:session@127.0.0.1"
    assert "is ready again" in c.get(f"/jobs/{job_id}").get_data(as_text=True)   # the one-shot message


def test_a_bearer_token_or_a_trusted_proxy_header_names_who_acts(memory_driver):
    first, second = dead_job(memory_driver, "a"), dead_job(memory_driver, "b")
    c = client(memory_driver, trusted_header="X-Forwarded-User")
    assert c.post(f"/jobs/{first}/retry", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 303
    assert memory_driver.job_get(first).history[-1]["error"] == "retried by ui:token@127.0.0.1"
    assert c.post(f"/jobs/{second}/retry", headers={"Authorization": "Bearer nope"}).status_code == 403
    csrf = csrf_of(c)
    assert c.post(f"/jobs/{second}/retry", data={"csrf": csrf},
                  headers={"X-Forwarded-User": "alice"}).status_code == 303
    assert memory_driver.job_get(second).history[-1]["error"] == "retried by ui:alice"


def test_sign_in_never_redirects_off_site(memory_driver):
    c = client(memory_driver)
    csrf = csrf_of(c)
    for target in ("//evil.example/x", "https://evil.example", "/\\evil.example", "/\t/evil.example",
                   "/\r\n/evil.example", "/\x0b/evil.example", "javascript:alert(1)"):
        answer = c.post("/login", data={"token": TOKEN, "csrf": csrf, "next": target})
        assert answer.headers["Location"] in ("/", "http://localhost/"), target


def test_a_bulk_retry_shows_its_count_and_acts_only_once_confirmed(memory_driver):
    for i in range(3):
        dead_job(memory_driver, f"k{i}", error="Timeout from smtp")
    other = dead_job(memory_driver, "other", error="KeyError")
    c, csrf = signed_in(memory_driver)
    form = {"csrf": csrf, "verb": "retry", "state": "dead", "error": "timeout"}
    asked = c.post("/bulk", data=form)
    assert asked.status_code == 200 and 'data-testid="count">3 job(s) match' in asked.get_data(as_text=True)
    assert sum(1 for v in memory_driver.job_list(_dead()) if v.state == "dead") == 4   # nothing yet
    done = c.post("/bulk", data={**form, "confirmed": "yes"})
    assert done.status_code == 303
    assert [v.id for v in memory_driver.job_list(_dead())] == [other]
    assert c.post("/bulk", data={"csrf": csrf, "verb": "retry"}).status_code == 400   # no filter
    assert c.post("/bulk", data={"csrf": csrf, "verb": "drop", "state": "dead"}).status_code == 400


def _dead():
    from xjobs.drivers.base import ListFilter
    return ListFilter(state="dead")


def test_cancel_pause_and_resume_record_who_asked(memory_driver):
    job_id = enqueue(memory_driver, "live")
    enqueue(memory_driver, "waiting")                   # the queue stays live, so listed, after the cancel
    c, csrf = signed_in(memory_driver)
    assert c.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf, "reason": "duplicate"}).status_code == 303
    assert memory_driver.job_get(job_id).last_error == "cancelled by ui:session@127.0.0.1: duplicate"
    assert c.post("/queues/default/pause", data={"csrf": csrf}).status_code == 303
    [control] = memory_driver.queue_control()
    assert control.paused and control.changed_by == "ui:session@127.0.0.1"
    assert "paused" in c.get("/").get_data(as_text=True)
    assert c.post("/queues/default/resume", data={"csrf": csrf}).status_code == 303
    assert not memory_driver.queue_control()[0].paused
    assert c.post("/queues/bad%01name/pause", data={"csrf": csrf}).status_code == 303
    assert "X_INVALID_OPTION" in c.get("/").get_data(as_text=True)              # refused, and said
    assert c.post("/queues/defualt/pause", data={"csrf": csrf}).status_code == 303   # a typo
    assert "X_QUEUE_UNKNOWN" in (page := c.get("/").get_data(as_text=True)) and "did you mean default" in page
    assert [q.name for q in memory_driver.queue_control()] == ["default"]


def test_the_chart_draws_what_workers_reported(memory_driver):
    memory_driver.rate_add({"default": {"completed": 40, "retried": 8, "dead": 2}})
    html = client(memory_driver).get("/").get_data(as_text=True)
    assert "50 runs ended, 10 failed (20.0%)" in html
    assert re.search(r"<title>\d\d:\d\d UTC: 50 ended, 10 failed \(20\.0%\)</title>", html)


def test_a_database_error_is_a_page_that_says_so(memory_driver):
    class Broken:
        def __getattr__(self, name):
            def fail(*args, **kw):
                raise DatabaseTimeout("canceling statement due to statement timeout")
            return fail
    page = Browser(Dashboard(Broken(), guard=Guard())).get("/jobs?error=x")
    assert page.status_code == 503 and "narrow the filter" in page.get_data(as_text=True)


def test_odd_numbers_and_cookies_are_refused_not_crashed_on(memory_driver):
    c = client(memory_driver)
    assert c.get("/jobs?before=\u00b2").status_code == 400          # "²".isdigit() is True
    assert c.get("/jobs?before=" + "9" * 30).status_code == 400
    assert c.get("/jobs/" + "9" * 30).status_code == 404
    c.set_cookie(SESSION_COOKIE, "\u00b25.x")
    assert c.get("/").status_code == 200
    c.set_cookie(SESSION_COOKIE, "9" * 3000 + ".x")
    assert c.get("/").status_code == 200
    assert c.get("/jobs?error=a%00b").status_code == 400


def test_a_loopback_dashboard_answers_only_to_its_own_address(memory_driver):
    app = Dashboard(memory_driver, guard=Guard(), hosts={"127.0.0.1:8080", "localhost:8080"})
    assert Browser(app).get("/", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    assert Browser(app).get("/", headers={"Host": "rebound.evil.example:8080"}).status_code == 421


def test_retry_all_in_a_group_from_the_dead_letters_page(memory_driver):
    short = dead_job(memory_driver, "a", error="Timeout")
    longer = dead_job(memory_driver, "b", error="Connection timeout, then Timeout")
    silent = dead_job(memory_driver, "c", error="")
    c, csrf = signed_in(memory_driver)
    page = c.get("/dead").get_data(as_text=True)
    assert page.count("Retry all in this group") == 3
    form = {"csrf": csrf, "verb": "retry", "queue": "default", "name": "send", "state": "dead", "group": "Timeout"}
    assert 'data-testid="count">1 job(s) match' in c.post("/bulk", data=form).get_data(as_text=True)
    assert c.post("/bulk", data={**form, "confirmed": "yes"}).status_code == 303
    assert [memory_driver.job_get(i).state for i in (short, longer, silent)] == ["ready", "dead", "dead"]
    listed = c.get("/jobs?state=dead&group=").get_data(as_text=True)    # the group with no error
    assert f'data-job="{silent}"' in listed and f'data-job="{longer}"' not in listed


def test_a_clean_jobs_page_tells_its_life_as_jobs_show_does(driver):
    job_id = enqueue(driver, "k1", enqueued_by="cli:alice")
    job = claim_one(driver, worker="w-host-1")
    assert driver.job_ack(job.id, job.token)
    page = client(driver).get(f"/jobs/{job_id}").get_data(as_text=True)
    history = page.split('data-testid="history"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<td>(enqueued|started|completed)</td><td class=\"error-cell\">([^<]*)</td>", history)
    assert rows == [("enqueued", "cli:alice"), ("started", "w-host-1"), ("completed", "w-host-1")]


def test_a_backfill_runs_page_shows_its_ledger_row_as_every_surface_projects_it(driver):
    from xjobs.drivers.ledger import BackfillFinish, BackfillStart, ledger_of
    from xjobs.factories.backfill_report import by_job
    job_id = enqueue(driver, "backfill:users")
    ledger = ledger_of(driver)
    assert ledger is not None
    ledger.backfill_start(BackfillStart(job_id, "users", "c0ffee", None))
    ledger.backfill_finish(BackfillFinish(job_id, "completed", 4200))
    html = client(driver).get(f"/jobs/{job_id}").get_data(as_text=True)
    run = by_job(driver)[job_id]
    assert f'data-testid="backfill">completed · 4200 rows swept · started {run["started_at"]}' in html
    other = enqueue(driver, "plain")
    assert 'data-testid="backfill"' not in client(driver).get(f"/jobs/{other}").get_data(as_text=True)
