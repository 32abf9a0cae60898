"""``webhook()`` against a real HTTP receiver on 127.0.0.1: one attempt at a time with
``run_inline``, and whole deliveries through a queue worker on both drivers."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest

import xjobs
from xjobs import testing
from xjobs.clock import ManualClock
from xjobs.errors import InvalidOption, WebhookFailed, WebhookThrottled
from xjobs.workers.failures import full_traceback
from xjobs.webhooks import (ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, MemoryLedger, WebhookEndpoint,
                            WebhookEvent, verify)

from tests.webhook_receiver import Receiver, Reply, receiving

SECRET = "whsec_s3cret_value"
TOKEN = "qu3ry_t0ken"            # a credential in the URL's query, as some receivers take one
BEARER = "b3arer_t0ken"
BODY = '{"order": 7, "total": "12.50"}'


@dataclass
class App:
    """The app's side: its endpoints and events (read on every attempt), and its ledger."""

    receiver: Receiver
    clock: ManualClock
    endpoints: dict[str, WebhookEndpoint] = field(default_factory=dict)
    events: dict[str, WebhookEvent] = field(default_factory=dict)
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    reads: list[str] = field(default_factory=list)

    def endpoint(self, endpoint_id: str) -> WebhookEndpoint | None:
        self.reads.append(endpoint_id)
        found = self.endpoints.get(endpoint_id)
        if found is not None and not self.ledger.enabled(endpoint_id):
            return WebhookEndpoint(found.url, found.secret, found.headers, enabled=False)
        return found

    def event(self, event_id: str) -> WebhookEvent | None:
        return self.events.get(event_id)

    def point(self, endpoint_id: str, path: str, **options) -> None:
        self.endpoints[endpoint_id] = WebhookEndpoint(url=self.receiver.url(f"{path}?token={TOKEN}"),
                                                      secret=SECRET, **options)

    def declare(self, **options) -> xjobs.JobHandle:
        options.setdefault("name", "order_hooks")
        options.setdefault("registry", xjobs.Registry())
        options.setdefault("endpoint", self.endpoint)
        options.setdefault("ledger", self.ledger)
        return xjobs.webhook(event=self.event, clock=self.clock, **options)


@pytest.fixture
def app():
    with receiving() as receiver:
        app = App(receiver, ManualClock(1_800_000_000_000.0))
        app.events["evt_1"] = WebhookEvent(topic="order.paid", body=BODY)
        yield app


def one(app, handle, attempt=1, endpoint_id="ep_1", event_id="evt_1"):
    return testing.run_inline(handle, {"endpoint_id": endpoint_id, "event_id": event_id}, attempt=attempt)


def test_a_delivery_is_signed_verifiable_and_recorded(app):
    app.receiver.answer("/hook", Reply(204))
    app.point("ep_1", "/hook")
    assert one(app, app.declare()) == {"delivered": True, "status": 204}
    [got] = app.receiver.at("/hook")
    assert got.body == BODY.encode() and got.headers["content-type"] == "application/json"
    checked = verify(got.headers, got.body, SECRET, clock=app.clock)
    assert (checked.event_id, checked.topic, checked.timestamp) == ("evt_1", "order.paid", 1_800_000_000)
    [attempt] = app.ledger.attempts
    assert (attempt.delivered, attempt.status, attempt.code, attempt.attempt) == (True, 204, None, 1)
    assert (attempt.endpoint_id, attempt.event_id, attempt.topic, attempt.sent_at) == (
        "ep_1", "evt_1", "order.paid", 1_800_000_000)


def test_the_timestamp_is_send_time_on_every_attempt_and_the_endpoint_is_read_each_time(app):
    app.receiver.answer("/down", Reply(500))
    app.receiver.answer("/moved", Reply(200))
    app.point("ep_1", "/down")
    handle = app.declare()
    with pytest.raises(WebhookFailed) as err:
        one(app, handle, attempt=1)
    assert err.value.code == "X_WEBHOOK_STATUS" and err.value.status == 500
    app.clock.advance(3 * 86_400_000)                      # retried three days later
    app.endpoints["ep_1"] = WebhookEndpoint(url=app.receiver.url("/moved"), secret="rotated")
    assert one(app, handle, attempt=2)["delivered"] is True
    [first], [second] = app.receiver.at("/down"), app.receiver.at("/moved")
    assert int(second.headers[TIMESTAMP_HEADER]) - int(first.headers[TIMESTAMP_HEADER]) == 3 * 86_400
    verify(second.headers, second.body, "rotated", clock=app.clock)    # signed anew, under the new secret
    assert app.reads == ["ep_1", "ep_1"]


def test_endpoint_headers_merge_under_the_framework_s_whatever_their_case(app):
    app.receiver.answer("/hook", Reply(200))
    app.point("ep_1", "/hook", headers={"X-Tenant": "acme", "XJobs-Webhook-Signature": "v1=" + "0" * 64,
                                        "XJOBS-WEBHOOK-TIMESTAMP": "1", "Content-Type": "text/evil"})
    one(app, app.declare())
    [got] = app.receiver.at("/hook")
    assert got.headers["x-tenant"] == "acme" and got.headers["content-type"] == "application/json"
    assert got.headers[SIGNATURE_HEADER] != "v1=" + "0" * 64 and got.headers[TIMESTAMP_HEADER] != "1"
    verify(got.headers, got.body, SECRET, clock=app.clock)


def test_a_redirect_is_a_failure_and_never_followed(app):
    app.receiver.answer("/hook", Reply(302, {"location": app.receiver.url("/elsewhere")}))
    app.receiver.answer("/elsewhere", Reply(200))
    app.point("ep_1", "/hook")
    with pytest.raises(WebhookFailed) as err:
        one(app, app.declare())
    assert err.value.code == "X_WEBHOOK_REDIRECT" and err.value.status == 302
    assert app.receiver.at("/elsewhere") == []
    assert [(a.delivered, a.status, a.code) for a in app.ledger.attempts] == [(False, 302, "X_WEBHOOK_REDIRECT")]


def test_every_failure_is_recorded_before_it_is_raised_and_the_nth_disables(app):
    app.receiver.answer("/down", Reply(503))
    app.point("ep_1", "/down")
    handle = app.declare(max_failures=3)
    seen: list[int] = []
    for attempt in (1, 2):
        with pytest.raises(WebhookFailed) as err:
            one(app, handle, attempt=attempt)
        seen.append(len(app.ledger.attempts))
        assert not isinstance(err.value, xjobs.Terminal)       # retried by the policy
    with pytest.raises(WebhookFailed) as err:
        one(app, handle, attempt=3)
    assert err.value.code == "X_WEBHOOK_DISABLED" and isinstance(err.value, xjobs.Terminal)
    assert seen == [1, 2] and len(app.ledger.attempts) == 3 and "3 consecutive failures" in app.ledger.disabled["ep_1"]
    # disabled: the next delivery ends without sending; re-enabling is the app's
    assert one(app, handle, event_id="evt_1") == {"delivered": False, "skipped": "endpoint_disabled"}
    assert len(app.receiver.at("/down")) == 3
    app.ledger.enable("ep_1")
    app.receiver.answer("/down", Reply(200))
    assert one(app, handle)["delivered"] is True and app.ledger.failures("ep_1") == 0


def test_a_delivery_resets_the_count(app):
    replies = iter([500, 500, 200, 500])
    app.receiver.answer("/flaky", lambda _r: Reply(next(replies)))
    app.point("ep_1", "/flaky")
    handle = app.declare(max_failures=3)
    outcomes = []
    for attempt in range(1, 5):
        try:
            outcomes.append(one(app, handle, attempt=attempt)["status"])
        except WebhookFailed as exc:
            outcomes.append(exc.code)
    assert outcomes == ["X_WEBHOOK_STATUS", "X_WEBHOOK_STATUS", 200, "X_WEBHOOK_STATUS"]
    assert app.ledger.failures("ep_1") == 1 and app.ledger.disabled == {}


@pytest.mark.parametrize("status, code, terminal", [(410, "X_WEBHOOK_GONE", True), (413, "X_WEBHOOK_TOO_LARGE", True),
                                                    (400, "X_WEBHOOK_STATUS", False), (404, "X_WEBHOOK_STATUS", False),
                                                    (500, "X_WEBHOOK_STATUS", False)])
def test_what_each_status_means(app, status, code, terminal):
    app.receiver.answer("/hook", Reply(status))
    app.point("ep_1", "/hook")
    with pytest.raises(WebhookFailed) as err:
        one(app, app.declare())
    assert (err.value.code, isinstance(err.value, xjobs.Terminal)) == (code, terminal)
    assert ("ep_1" in app.ledger.disabled) is (status == 410)    # Gone: the receiver says it is not coming back


def test_a_throttled_answer_comes_back_when_told(app):
    app.receiver.answer("/busy", Reply(429, {"retry-after": "120"}))
    app.point("ep_1", "/busy")
    with pytest.raises(WebhookThrottled) as err:
        one(app, app.declare())
    assert isinstance(err.value, xjobs.RetryAfter)      # so the retry decision waits as told
    assert err.value.seconds == 120.0 and err.value.code == "X_WEBHOOK_STATUS"


def test_gone_events_and_endpoints_end_without_sending(app):
    handle = app.declare()
    assert one(app, handle, endpoint_id="nobody") == {"delivered": False, "skipped": "endpoint_gone"}
    app.point("ep_1", "/hook")
    assert one(app, handle, event_id="evt_gone") == {"delivered": False, "skipped": "event_gone"}
    assert app.receiver.received == [] and app.ledger.attempts == []


def test_a_hanging_receiver_times_out_within_its_bound(app):
    app.receiver.answer("/hang", Reply(hang=True))
    app.point("ep_1", "/hang")
    with pytest.raises(WebhookFailed) as err:
        one(app, app.declare(connect_timeout="500ms", read_timeout="200ms", total_timeout="1s", timeout="5s"))
    assert err.value.code == "X_WEBHOOK_TIMEOUT"
    assert app.ledger.attempts[0].code == "X_WEBHOOK_TIMEOUT"


def test_a_receiver_that_drips_its_answer_is_cut_off_by_the_total_timeout(app):
    app.receiver.answer("/drip", Reply(drip=True))
    app.point("ep_1", "/drip")
    with pytest.raises(WebhookFailed) as err:
        one(app, app.declare(connect_timeout="500ms", read_timeout="500ms", total_timeout="1s", timeout="5s"))
    assert err.value.code == "X_WEBHOOK_TIMEOUT" and "total timeout" in str(err.value)


@pytest.mark.parametrize("url, code", [("http://127.0.0.1:1/x?token=" + TOKEN, "X_WEBHOOK_UNREACHABLE"),
                                       ("ftp://files.example/" + TOKEN, "X_WEBHOOK_ENDPOINT_INVALID"),
                                       ("http://[::1" + TOKEN, "X_WEBHOOK_ENDPOINT_INVALID"),
                                       (f"http://user:{TOKEN}@127.0.0.1:1/", "X_WEBHOOK_UNREACHABLE")])
def test_no_failure_text_or_log_line_holds_the_url_the_headers_or_the_secret(app, url, code, caplog):
    app.endpoints["ep_1"] = WebhookEndpoint(url=url, secret=SECRET, headers={"authorization": f"Bearer {BEARER}"})
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(WebhookFailed) as err:
            one(app, app.declare())
    assert err.value.code == code and err.value.__cause__ is None
    chained, link = [], err.value.__context__
    while link is not None:
        chained.append(type(link).__module__)
        link = link.__context__
    assert not [m for m in chained if m.startswith(("httpx", "httpcore"))]   # the client's own text is not carried
    texts = [str(err.value), repr(err.value), full_traceback(err.value) or "", app.ledger.attempts[0].error or "",
             caplog.text]
    for text in texts:
        assert not any(s in text for s in (TOKEN, SECRET, BEARER)), text


def test_a_header_value_the_client_would_quote_back_is_refused_without_quoting_it(app):
    app.endpoints["ep_1"] = WebhookEndpoint(url=app.receiver.url("/hook"), secret=SECRET,
                                            headers={"authorization": f"Bearer {BEARER}\u00e9"})
    with pytest.raises(WebhookFailed) as err:
        one(app, app.declare())
    assert err.value.code == "X_WEBHOOK_ENDPOINT_INVALID" and BEARER not in str(err.value)
    assert app.ledger.attempts[0].code == "X_WEBHOOK_ENDPOINT_INVALID" and app.receiver.received == []


def test_a_sent_request_leaves_no_url_in_the_log(app, caplog):
    app.receiver.answer("/hook", Reply(200))
    app.point("ep_1", "/hook")
    with caplog.at_level(logging.DEBUG):
        one(app, app.declare())
    assert TOKEN not in caplog.text and SECRET not in caplog.text


def test_the_input_is_ids_only_and_the_key_names_the_endpoint_and_the_event(app):
    handle = app.declare()
    with testing.memory_queue():
        first = handle.enqueue({"endpoint_id": "ep_1", "event_id": "evt_1"})
        other = handle.enqueue({"endpoint_id": 2, "event_id": "evt_1"})   # a whole number, kept as text
        again = handle.enqueue({"endpoint_id": "ep_1", "event_id": "evt_1"})
        assert again.deduped and again.id == first.id and not other.deduped
        [one_job] = testing.assert_enqueued(handle, input={"endpoint_id": "2", "event_id": "evt_1"}, count=1)
        assert one_job.idempotency_key == "order_hooks:2:evt_1"
        for bad in ({"endpoint_id": "ep_1", "event_id": "evt_1", "url": "https://x"},
                    {"endpoint_id": "a:b", "event_id": "evt_1"}, {"endpoint_id": True, "event_id": "e"},
                    {"event_id": "evt_1"}, ["ep_1", "evt_1"]):
            with pytest.raises(xjobs.XJobsError) as err:
                handle.enqueue(bad)
            assert err.value.code == "X_JOB_INPUT_INVALID"


@pytest.mark.parametrize("option, value", [
    ("max_failures", 0), ("max_failures", True), ("max_failures", 2.5), ("max_failures", float("nan")),
    ("connect_timeout", float("nan")), ("read_timeout", -1), ("total_timeout", "soon"), ("total_timeout", "11m"),
    ("total_timeout", "1s"), ("timeout", "20s"), ("endpoint", "https://x"), ("ledger", object()), ("name", ""),
])
def test_knobs_are_refused_at_declaration(app, option, value):
    with pytest.raises(InvalidOption) as err:
        app.declare(**{option: value})
    assert err.value.code == "X_INVALID_OPTION"


def test_one_name_declared_twice_is_one_declaration_only_with_the_same_callables(app):
    registry = xjobs.Registry()
    first = app.declare(registry=registry)
    assert app.declare(registry=registry).name == first.name          # a module imported twice
    with pytest.raises(xjobs.XJobsError) as err:
        app.declare(registry=registry, endpoint=lambda endpoint_id: None)
    assert err.value.code == "X_JOB_DUPLICATE"


def test_without_httpx_the_declaration_says_which_extra(app, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(xjobs.XJobsError) as err:
        app.declare()
    assert err.value.code == "X_EXTRA_MISSING" and "xjobsd[webhook]" in str(err.value)
