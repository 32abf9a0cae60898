"""The dashboard's pages for watching, through werkzeug's test client: the jobs running now
(newest started first, per queue, paged by keyset, linked from the nav and the overview),
tracebacks collapsed to their first line, and the words for states, which are the command
line's own (``xjobsd jobs ls``, ``jobs show``, ``queues ls``, run as a subprocess)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

from tests.cli.commands import xjobsd_on  # noqa: E402
from tests.drivers.parity import claim, claim_one, enqueue  # noqa: E402
from tests.ui.clients import client, dead_job  # noqa: E402
from xjobs.drivers.base import STATES, Lease, Nack, Progress  # noqa: E402

TRACE = 'Traceback (most recent call last):\n  File "app.py", line 3, in send\nRuntimeError: smtp down\n'


def shown(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-job="(\d+)"', html)]


def test_running_now_lists_newest_started_first_with_worker_age_and_progress(memory_driver, clock):
    first = enqueue(memory_driver, "a")
    enqueue(memory_driver, "b")
    enqueue(memory_driver, "ready")                      # never claimed: not running
    other = enqueue(memory_driver, "o", queue="other")
    claim_one(memory_driver, worker="worker:host:aaaa")
    clock.advance(90_000)
    second = claim_one(memory_driver, worker="worker:host:bbbb")
    memory_driver.job_progress_many([Progress(Lease(second.id, second.token), 3, 10, "page 3", clock.now_ms())])
    clock.advance(2_000)
    claim_one(memory_driver, "other", worker="worker:host:cccc")
    c = client(memory_driver)
    html = c.get("/running").get_data(as_text=True)
    assert shown(html) == [other, second.id, first]
    row = html[html.index(f'data-job="{second.id}"'):html.index(f'data-job="{first}"')]
    assert "worker:host:bbbb" in row and f'href="/jobs/{second.id}"' in row and ">send<" in row
    assert re.search(r'data-testid="started">2\.0s ago<', row)
    assert re.search(r'<progress value="3(\.0)?" max="10(\.0)?">', row) and "3/10 · page 3" in row
    oldest = html[html.index(f'data-job="{first}"'):]
    assert re.search(r'data-testid="started">1m32s ago<', oldest)
    assert shown(c.get("/running?queue=other").get_data(as_text=True)) == [other]
    assert "Nothing is running in queue nope" in c.get("/running?queue=nope").get_data(as_text=True)


def test_running_now_pages_by_start_time_and_id_through_ties(memory_driver, clock):
    for i in range(120):
        enqueue(memory_driver, f"k{i}")
    started = []
    for batch in range(12):                              # ten claimed at each instant: ties
        started.append([j.id for j in claim(memory_driver, limit=10)])
        clock.advance(1_000)
    expected = [job_id for batch in reversed(started) for job_id in sorted(batch, reverse=True)]
    c = client(memory_driver)
    seen, path = [], "/running"
    for _ in range(3):
        html = c.get(path).get_data(as_text=True)
        seen += shown(html)
        older = re.search(r'href="(/running\?[^"]*)" data-testid="older"', html)
        if older is None:
            break
        path = older.group(1).replace("&amp;", "&")
    assert seen == expected and older is None


@pytest.mark.parametrize("query", ["before=7", "started=1.5", "before=x&started=1", "before=7&started=nan",
                                   "before=7&started=-1", "queue=a%00b"])
def test_a_bad_running_cursor_or_queue_is_refused(memory_driver, query):
    page = client(memory_driver).get(f"/running?{query}")
    assert page.status_code == 400


def test_the_nav_and_the_overview_running_counts_link_to_running_now(memory_driver):
    enqueue(memory_driver, "a", queue="mail")
    claim_one(memory_driver, "mail")
    html = client(memory_driver).get("/").get_data(as_text=True)
    assert '<a href="/running">Running</a>' in html                          # the nav
    assert re.search(r'data-testid="running"><a href="/running\?queue=mail">1</a>', html)


def test_tracebacks_and_many_line_errors_are_collapsed_to_their_first_line(memory_driver):
    job_id = dead_job(memory_driver, "t", error="RuntimeError: smtp down\nwhile sending to 3 people", traceback=TRACE)
    dead_job(memory_driver, "plain", error="KeyError: 'user'")
    c = client(memory_driver)
    page = c.get(f"/jobs/{job_id}").get_data(as_text=True)
    [trace] = re.findall(r'<details data-testid="traceback"[^>]*>.*?</details>', page, re.S)
    assert " open" not in trace.split(">")[0]                                    # collapsed
    assert re.search(r"<summary>RuntimeError: smtp down <span", trace) and "File &#34;app.py&#34;" in trace
    dead = c.get("/dead").get_data(as_text=True)
    assert re.search(r'<details class="error-text"><summary>RuntimeError: smtp down</summary>', dead)
    assert "while sending to 3 people" in dead
    assert re.search(r'<td class="error-cell">KeyError: &#39;user&#39;</td>', dead)    # one line: as it is


def jobs_in_every_state(driver) -> dict[str, int]:
    claimed = ("running", "suspended", "completed", "dead")   # enqueued first: claimed in this order
    ids = {state: enqueue(driver, state) for state in claimed + tuple(s for s in STATES if s not in claimed)}
    for state in claimed:
        job = claim_one(driver, worker="w")
        assert job.id == ids[state]
        if state == "suspended":
            driver.job_nack(Nack(job.id, job.token, "suspended", delay_ms=3_600_000))
        elif state == "completed":
            driver.job_ack(job.id, job.token)
        elif state == "dead":
            driver.job_nack(Nack(job.id, job.token, "dead", error="boom"))
    driver.job_cancel(ids["cancelled"], "cancelled by test")
    driver.queue_pause("paused", True, by="cli:ops")
    assert {state: driver.job_get(i).state for state, i in ids.items()} == {s: s for s in STATES}
    return ids


def column(table: str, header: str) -> dict[str, str]:
    """A text table as ``print_table`` lays it out: the first column's value -> ``header``'s."""
    head, *rows = table.splitlines()
    start = head.index(header.upper())
    end = next((m.start() for m in re.finditer(r"  (?=\S)", head) if m.start() > start), None)
    return {row.split()[0]: row[start:end].strip() for row in rows}


def test_the_dashboard_says_each_state_in_the_command_lines_words(pg_driver, pg_dsn):
    ids = jobs_in_every_state(pg_driver)
    cli = xjobsd_on(pg_dsn, pg_driver.schema)
    with ThreadPoolExecutor(4) as pool:                  # each a process of its own
        ls, qs, *shows = pool.map(lambda args: cli(*args).stdout,
                                  [("jobs", "ls"), ("queues", "ls")] + [("jobs", "show", str(i)) for i in ids.values()])
    listed, queues = column(ls, "state"), column(qs, "state")
    c = client(pg_driver)
    jobs_page = c.get("/jobs").get_data(as_text=True)
    overview = c.get("/").get_data(as_text=True)
    for (state, job_id), show in zip(ids.items(), shows):
        said = re.search(rf'<tr data-job="{job_id}">.*?<span class="state \w+">([^<]*)</span>', jobs_page, re.S)
        assert said and said.group(1) == listed[str(job_id)] == state
        shown_line = re.search(r"^state\s+(\S+)$", show, re.M)
        one = re.search(r'data-testid="job-state">([^<]*)<', c.get(f"/jobs/{job_id}").get_data(as_text=True))
        assert shown_line and one and one.group(1) == shown_line.group(1) == state
    for queue in ("default", "paused"):
        cell = re.search(rf'<tr data-queue="{queue}">.*?data-testid="state">(.*?)</td>', overview, re.S)
        assert cell and re.sub(r"<[^>]+>", "", cell.group(1)) == queues[queue]
    assert queues == {"default": "active", "paused": "paused by cli:ops"}
