"""What ``jobs show`` says of a ready job that is not running: "snoozed until T" when its body
snoozed (how often, of the most its job allows when the app is at hand), "debounced: starts
at T unless enqueued again, at the latest D" when its job debounces and it has not started,
"scheduled for T" when it is due later for any other reason, its tenant's share when it is due
in a fair queue behind other keys' turns or its own key's jobs, nothing once it may run now;
``--json`` carries the same sentence as ``waiting`` (and a fair job's place as ``fair``), and
the dashboard's job page says it too."""

from __future__ import annotations

import pytest

from tests.apps import fair_app, waiting_app
from tests.cli.commands import as_json
from tests.drivers.parity import claim, new_job
from xjobs.drivers.base import Nack
from xjobs.drivers.fair import FairClaim
from xjobs.enqueue import enqueue_many
from xjobs.views import iso

pytestmark = pytest.mark.postgres
WAITS = "tests.apps.waiting_app"   # settle_doc: debounce 1h, at most 1d; light_sleeper: max_snoozes=3
FAIR = "tests.apps.fair_app"    # fair_work: shared out by tenant


def waiting_line(text: str) -> str | None:
    line = next((ln for ln in text.splitlines() if ln.startswith("waiting for")), None)
    return None if line is None else line.split(None, 2)[2]


def said(xjobsd, job_id: int, *app: str) -> tuple[str | None, str | None]:
    """What ``jobs show`` says and ``--json`` answers of why the job waits."""
    text = waiting_line(xjobsd("jobs", "show", str(job_id), *app).stdout)
    return text, as_json(xjobsd("jobs", "show", str(job_id), "--json", *app))["waiting"]


def escaped(text: str) -> str:
    from markupsafe import escape   # as the dashboard's templates escape it
    return str(escape(text))


def dashboard_says(driver, job_id: int) -> str:
    pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")
    from werkzeug.test import Client

    from xjobs.ui.app import Dashboard
    from xjobs.ui.auth import Guard
    page = Client(Dashboard(driver, guard=Guard())).get(f"/jobs/{job_id}", environ_base={"REMOTE_ADDR": "127.0.0.1"})
    return page.get_data(as_text=True)


def test_show_says_a_ready_job_is_snoozed_or_scheduled_until_when(xjobsd, driver):
    napper = driver.job_enqueue([new_job("nap")])[0].id
    [job] = claim(driver)
    assert driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=600_000))
    later = driver.job_enqueue([new_job("later")._replace(delay_ms=3_600_000)])[0].id
    due = driver.job_enqueue([new_job("due")])[0].id
    for job_id, sentence in ((napper, f"snoozed until {iso(driver.job_get(napper).run_at)} (snooze 1)"),
                             (later, f"scheduled for {iso(driver.job_get(later).run_at)}")):
        assert said(xjobsd, job_id) == (sentence, sentence)
    assert said(xjobsd, due) == (None, None)


def test_with_the_app_a_debounced_job_says_when_it_starts_and_a_snoozed_one_its_limit(xjobsd, driver):
    [first] = enqueue_many(waiting_app.settle_doc, [{"doc": 7, "v": 1}], driver=driver)
    [again] = enqueue_many(waiting_app.settle_doc, [{"doc": 7, "v": 2}], driver=driver)
    assert again.id == first.id and again.debounced
    view = driver.job_get(first.id)
    debounced = (f"debounced: starts at {iso(view.run_at)} unless enqueued again, "
                 f"at the latest {iso(view.created_at + 86_400_000.0)}")
    assert said(xjobsd, first.id, "--app", WAITS) == (debounced, debounced)
    scheduled = f"scheduled for {iso(view.run_at)}"
    assert said(xjobsd, first.id) == (scheduled, scheduled)      # no app at hand: its debounce is unknown
    assert escaped(debounced) in dashboard_says(driver, first.id)   # this process imported waiting_app

    [nap] = enqueue_many(waiting_app.light_sleeper, [{"n": 1}], driver=driver)
    [job] = [j for j in claim(driver, "waits") if j.id == nap.id]
    assert driver.job_nack(Nack(job.id, job.token, "snoozed", delay_ms=600_000))
    snoozed = f"snoozed until {iso(driver.job_get(nap.id).run_at)} (snooze 1 of at most 3)"
    assert said(xjobsd, nap.id, "--app", WAITS) == (snoozed, snoozed)


@pytest.mark.slow
def test_a_due_job_of_a_fair_queue_says_where_its_tenant_stands(xjobsd, driver):
    a = [e.id for e in enqueue_many(fair_app.fair_work, [{"t": "a", "n": n} for n in range(3)], driver=driver)]
    b = [e.id for e in enqueue_many(fair_app.fair_work, [{"t": "b", "n": n} for n in range(2)], driver=driver)]
    c = [e.id for e in enqueue_many(fair_app.fair_work, [{"t": "c", "n": 0}], driver=driver)]
    assert driver.fair is not None
    [taken] = driver.fair.job_claim_fair(FairClaim("fair", 1, 30_000.0, "w1"))
    assert taken.id == a[0]                                   # a's turn is over: b and c come before it
    behind = "its tenant's share: all 2 other keys with ready work turn before tenant 'a'; 1 of its due jobs comes first"
    assert said(xjobsd, a[2]) == (behind, behind)
    assert as_json(xjobsd("jobs", "show", str(a[2]), "--json"))["fair"] == {
        "key": "a", "ahead": 1, "keys_ahead": 2, "keys": 3}
    assert escaped(behind) in dashboard_says(driver, a[2])
    second = "its tenant's share: 1 of the 2 other keys with ready work turns before tenant 'c'; it is first of its jobs"
    assert said(xjobsd, c[0]) == (second, second)
    line = "its tenant's share: tenant 'b' is first in the rotation; 1 of its due jobs comes first"
    assert said(xjobsd, b[1]) == (line, line)
    assert said(xjobsd, b[0]) == (None, None)             # next in every line: it waits for a worker only
    assert as_json(xjobsd("jobs", "show", str(b[0]), "--json"))["fair"] == {
        "key": "b", "ahead": 0, "keys_ahead": 0, "keys": 3}
    assert "fair" not in as_json(xjobsd("jobs", "show", str(a[0]), "--json"))   # running: no place to tell
