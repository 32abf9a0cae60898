"""Whole webhook deliveries through a queue worker, on both drivers: what the job row ends up
holding (ids, a key per endpoint and event, no steps, no secret), and how the retries go."""

from __future__ import annotations

import pytest

import xjobs
from xjobs import testing
from xjobs.enqueue import enqueue_many
from xjobs.webhooks import MemoryLedger, WebhookEndpoint, WebhookEvent, verify

from tests.webhook_receiver import Reply, receiving

SECRET = "whsec_q_s3cret"
TOKEN = "q_t0ken_in_query"


@pytest.fixture
def receiver():
    with receiving() as receiver:
        yield receiver


def declare(receiver, clock, ledger, paths: dict[str, str], **options):
    def endpoint(endpoint_id):
        if endpoint_id not in paths:
            return None
        return WebhookEndpoint(url=receiver.url(f"{paths[endpoint_id]}?token={TOKEN}"), secret=SECRET,
                               headers={"authorization": f"Bearer {TOKEN}"},
                               enabled=endpoint_id not in ledger.disabled)

    def event(event_id):
        return WebhookEvent(topic="invoice.sent", body=f'{{"invoice": "{event_id}"}}')
    registry = xjobs.Registry()
    handle = xjobs.webhook(name="invoice_hooks", endpoint=endpoint, event=event, ledger=ledger, clock=clock,
                           registry=registry, **options)
    return handle, registry


def shown(view) -> str:
    """Everything a job row shows an operator, as text."""
    return repr((view.payload, view.last_error, view.idempotency_key, view.history, view.steps, view.progress))


def test_the_app_fans_out_one_job_per_endpoint_and_each_is_delivered_once(driver, clock, receiver):
    receiver.answer("/a", Reply(200))
    receiver.answer("/b", Reply(202))
    ledger = MemoryLedger()
    handle, registry = declare(receiver, clock, ledger, {"ep_a": "/a", "ep_b": "/b"})
    # the app's own loop: one enqueue per subscribed endpoint
    jobs = enqueue_many(handle, [{"endpoint_id": e, "event_id": "inv_9"} for e in ("ep_a", "ep_b")], driver=driver)
    summary = testing.run_until_idle(driver=driver, registry=registry)
    assert summary.completed == 2
    for job, path in zip(jobs, ("/a", "/b")):
        view = driver.job_get(job.id)
        assert view.state == "completed" and view.steps == ()         # no step: nothing of a run is stored
        assert view.payload == {"endpoint_id": f"ep_{path[1]}", "event_id": "inv_9"}
        assert view.idempotency_key == f"invoice_hooks:ep_{path[1]}:inv_9"
        [got] = receiver.at(path)
        assert verify(got.headers, got.body, SECRET, clock=clock).event_id == "inv_9"
        assert SECRET not in shown(view) and TOKEN not in shown(view)
    assert sorted(a.endpoint_id for a in ledger.attempts if a.delivered) == ["ep_a", "ep_b"]


def test_a_failing_endpoint_is_disabled_after_n_and_its_next_deliveries_are_not_sent(driver, clock, receiver):
    receiver.answer("/down", Reply(500))
    ledger = MemoryLedger()
    handle, registry = declare(receiver, clock, ledger, {"ep_down": "/down"}, max_failures=3,
                               retry=xjobs.Retry(attempts=8, delay="1s", max_delay="1m"))
    [first] = enqueue_many(handle, [{"endpoint_id": "ep_down", "event_id": "inv_1"}], driver=driver)
    summary = testing.run_until_idle(driver=driver, registry=registry, with_scheduled=True)
    assert (summary.retried, summary.dead) == (2, 1)
    view = driver.job_get(first.id)
    assert (view.state, view.attempt) == ("dead", 3) and "X_WEBHOOK_DISABLED" in view.last_error
    assert [a.attempt for a in ledger.attempts] == [1, 2, 3] and "ep_down" in ledger.disabled
    assert SECRET not in shown(view) and TOKEN not in shown(view)
    # later events for the disabled endpoint complete without a request
    [later] = enqueue_many(handle, [{"endpoint_id": "ep_down", "event_id": "inv_2"}], driver=driver)
    assert testing.run_until_idle(driver=driver, registry=registry).completed == 1
    assert driver.job_get(later.id).state == "completed" and len(receiver.at("/down")) == 3


def test_a_throttled_delivery_waits_as_long_as_it_was_told(driver, clock, receiver):
    receiver.answer("/busy", Reply(429, {"retry-after": "90"}))
    handle, registry = declare(receiver, clock, MemoryLedger(), {"ep": "/busy"},
                               retry=xjobs.Retry(attempts=3, delay="1s", max_delay="1h"))
    [job] = enqueue_many(handle, [{"endpoint_id": "ep", "event_id": "inv_1"}], driver=driver)
    assert testing.run_until_idle(driver=driver, registry=registry).retried == 1
    view = driver.job_get(job.id)
    assert view.state == "ready" and abs(view.run_at - clock.now_ms() - 90_000) < 1_000
