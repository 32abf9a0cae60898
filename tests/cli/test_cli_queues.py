"""The queues an operator sees and steers are the app's declared ones, those holding live jobs
and those paused; a name that is none of them (most likely misspelt) is refused by pause and
resume, naming the ones known, unless ``--force``, and a switch left resumed on such a name
is listed nowhere: not by ``queues ls``, ``xjobs.queues()`` nor the dashboard."""

from __future__ import annotations

import pytest

import xjobs
from tests.cli.commands import as_json
from tests.cli.test_cli_refusals import refused
from xjobs.drivers.base import NewJob
from xjobs.registry import Registry

pytestmark = pytest.mark.postgres
APP = "tests.apps.cli_app"     # declares one queue, mail


def names(xjobsd, *args: str) -> list[str]:
    return [row["name"] for row in as_json(xjobsd("queues", "ls", "--json", *args))]


def dashboard_lists(driver, queue: str) -> bool:
    pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")
    from werkzeug.test import Client

    from xjobs.ui.app import Dashboard
    from xjobs.ui.auth import Guard
    page = Client(Dashboard(driver, guard=Guard())).get("/", environ_base={"REMOTE_ADDR": "127.0.0.1"})
    assert page.status_code == 200
    return f">{queue}<" in page.get_data(as_text=True)


def test_a_declared_queue_with_no_jobs_is_listed_and_may_be_paused(xjobsd, driver):
    assert names(xjobsd) == []                       # no app at hand, no job: nothing to show
    [mail] = as_json(xjobsd("queues", "ls", "--app", APP, "--json"))
    assert (mail["name"], mail["paused"], mail["depth"], mail["ready"]) == ("mail", False, 0, 0)
    assert xjobsd("queues", "pause", "mail", "--app", APP).stdout.startswith("queue mail paused fleet-wide")
    assert names(xjobsd) == ["mail"]                 # paused: listed with or without the app
    xjobsd("queues", "resume", "mail")               # known, being paused: no app needed
    assert names(xjobsd) == [] and names(xjobsd, "--app", APP) == ["mail"]


def test_a_queue_nothing_names_is_refused_unless_forced_and_leaves_no_trace(xjobsd, driver):
    driver.job_enqueue([NewJob(name="other", queue="reports", payload=b"{}", idempotency_key="k")])
    code, message, hint = refused(xjobsd("queues", "pause", "mial", "--app", APP, expect=2))
    assert code == "X_QUEUE_UNKNOWN"
    assert message == "no queue 'mial': the app does not declare it, and it holds no job and is not paused " \
                      "(did you mean mail?)"
    assert hint == "the queues known are: mail, reports; --force pauses it anyway"
    _, message, hint = refused(xjobsd("queues", "resume", "nosuchqueue", expect=2))
    assert message == "no queue 'nosuchqueue': it holds no job and is not paused"
    assert hint == ("no app was given or found, so the queues known are those with jobs or paused: reports; "
                    "pass --app MODULE; --force resumes it anyway")
    assert names(xjobsd, "--app", APP) == ["mail", "reports"]     # the refusals changed nothing

    assert xjobsd("queues", "pause", "nosuchqueue", "--force").stdout.startswith("queue nosuchqueue paused")
    assert names(xjobsd) == ["nosuchqueue", "reports"] and dashboard_lists(driver, "nosuchqueue")
    xjobsd("queues", "resume", "nosuchqueue")        # a paused queue is known: no --force needed
    assert names(xjobsd) == ["reports"]
    assert [row["name"] for row in xjobs.queues(driver=driver, registry=Registry())] == ["reports"]
    # the queues this process declares are listed with no job yet, as `--app` lists them
    declares = Registry()

    @xjobs.job(queue="mail", idempotency_key=str, tenant="none", registry=declares)
    def send(ctx: object, input: object) -> None: ...
    assert [(row["name"], row["ready"]) for row in xjobs.queues(driver=driver, registry=declares)] == [
        ("mail", 0), ("reports", 1)]
    assert not dashboard_lists(driver, "nosuchqueue")
