"""The webhook wire format: one canonical string, one MAC for the sending (``str``) and the
receiving (``bytes``) forms, four headers, and ``verify``'s refusals, each with its code."""

from __future__ import annotations

import hashlib
import hmac
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xjobs.clock import ManualClock
from xjobs.errors import InvalidOption, WebhookSignatureInvalid
from xjobs.webhooks import (ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, TOPIC_HEADER, WebhookEndpoint,
                            WebhookEvent, canonical, signature, signed_headers, verify)

NOW_S = 1_800_000_000
_fields = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=":"),
                  min_size=1, max_size=40)
_secrets = st.one_of(st.text(min_size=1, max_size=40), st.binary(min_size=1, max_size=40))


def at(seconds: float) -> ManualClock:
    return ManualClock(seconds * 1000.0)


def test_the_canonical_string_and_its_mac_are_pinned():
    body = '{"order": 1, "note": "a:b"}'
    assert canonical(NOW_S, "evt_1", "order.paid", body) == \
        b'v1:1800000000:evt_1:order.paid:{"order": 1, "note": "a:b"}'
    expected = hmac.new(b"whsec", b'v1:1800000000:evt_1:order.paid:{"order": 1, "note": "a:b"}',
                        hashlib.sha256).hexdigest()
    assert signature("whsec", NOW_S, "evt_1", "order.paid", body) == expected
    assert signed_headers("whsec", NOW_S, "evt_1", "order.paid", body) == {
        ID_HEADER: "evt_1", TOPIC_HEADER: "order.paid", TIMESTAMP_HEADER: "1800000000",
        SIGNATURE_HEADER: f"v1={expected}"}


@settings(max_examples=200, deadline=None)
@given(body=st.text(max_size=300), event_id=_fields, topic=_fields, secret=_secrets,
       ts=st.integers(min_value=0, max_value=10**11))
def test_the_sending_str_and_the_receiving_bytes_are_one_function_and_verify_round_trips(
        body, event_id, topic, secret, ts):
    sent = signature(secret, ts, event_id, topic, body)
    assert sent == signature(secret, ts, event_id, topic, body.encode())   # str on one side, bytes on the other
    headers = signed_headers(secret, ts, event_id, topic, body)
    got = verify(headers, body.encode(), secret, clock=at(ts))
    assert (got.event_id, got.topic, got.timestamp, got.body) == (event_id, topic, ts, body.encode())


@settings(max_examples=200, deadline=None)
@given(body=st.binary(min_size=1, max_size=200), secret=_secrets, data=st.data())
def test_any_tampering_is_a_mismatch(body, secret, data):
    headers = signed_headers(secret, NOW_S, "evt_1", "order.paid", body)
    clock = at(NOW_S)
    spot = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    flipped = body[:spot] + bytes([body[spot] ^ data.draw(st.integers(1, 255))]) + body[spot + 1:]
    tampered = [
        (headers, flipped, secret),                                      # the body
        (headers, body + b" ", secret),                                  # one byte more
        ({**headers, ID_HEADER: "evt_2"}, body, secret),                  # another event's id
        ({**headers, TOPIC_HEADER: "order.refunded"}, body, secret),      # another topic
        ({**headers, TIMESTAMP_HEADER: str(NOW_S - 1)}, body, secret),    # a moved timestamp
        (headers, body, (secret + "x") if isinstance(secret, str) else secret + b"x"),   # the wrong secret
    ]
    for given_headers, given_body, given_secret in tampered:
        with pytest.raises(WebhookSignatureInvalid) as err:
            verify(given_headers, given_body, given_secret, clock=clock)
        assert err.value.code == "X_WEBHOOK_SIGNATURE_MISMATCH"


def test_headers_are_read_in_any_case_and_a_rotation_list_is_accepted():
    headers = signed_headers("s3cret", NOW_S, "evt_1", "t", b"{}")
    shouting = {name.upper(): value for name, value in headers.items()}
    assert verify(shouting, b"{}", "s3cret", clock=at(NOW_S)).event_id == "evt_1"
    two = {**headers, SIGNATURE_HEADER: f"v1={'0' * 64}, {headers[SIGNATURE_HEADER]}"}
    assert verify(two, b"{}", "s3cret", clock=at(NOW_S)).topic == "t"
    assert verify(headers, "{}", "s3cret", clock=at(NOW_S)).body == b"{}"   # a body given as str


@pytest.mark.parametrize("offset_s, ok", [(-300, True), (300, True), (-301, False), (301, False)])
def test_a_timestamp_beyond_the_tolerance_either_way_is_stale(offset_s, ok):
    headers = signed_headers("s", NOW_S, "e", "t", b"x")
    clock = at(NOW_S + offset_s)
    if ok:
        verify(headers, b"x", "s", tolerance="5m", clock=clock)
        return
    with pytest.raises(WebhookSignatureInvalid) as err:
        verify(headers, b"x", "s", tolerance="5m", clock=clock)
    assert err.value.code == "X_WEBHOOK_SIGNATURE_STALE"
    assert ("ago" if offset_s > 0 else "in the future") in str(err.value)


def test_a_stale_request_is_refused_before_its_mac_is_even_looked_at():
    headers = {**signed_headers("s", NOW_S, "e", "t", b"x"), SIGNATURE_HEADER: f"v1={'f' * 64}"}
    with pytest.raises(WebhookSignatureInvalid) as err:
        verify(headers, b"x", "s", clock=at(NOW_S + 3600))
    assert err.value.code == "X_WEBHOOK_SIGNATURE_STALE"


@pytest.mark.parametrize("change", [
    {ID_HEADER: None}, {TOPIC_HEADER: None}, {TIMESTAMP_HEADER: None}, {SIGNATURE_HEADER: None},
    {TIMESTAMP_HEADER: "soon"}, {TIMESTAMP_HEADER: "-5"}, {TIMESTAMP_HEADER: "1e9"},
    {SIGNATURE_HEADER: "sha256=abc"}, {SIGNATURE_HEADER: "v1=XYZ"}, {SIGNATURE_HEADER: "v1=" + "a" * 63},
    {ID_HEADER: "a:b"}, {ID_HEADER: ""},
])
def test_a_missing_or_malformed_header_is_refused_as_missing(change):
    headers = dict(signed_headers("s", NOW_S, "e", "t", b"x"))
    for name, value in change.items():
        if value is None:
            del headers[name]
        else:
            headers[name] = value
    with pytest.raises(WebhookSignatureInvalid) as err:
        verify(headers, b"x", "s", clock=at(NOW_S))
    assert err.value.code == "X_WEBHOOK_SIGNATURE_MISSING"


def test_a_header_given_twice_is_refused():
    pairs = [*signed_headers("s", NOW_S, "e", "t", b"x").items(), (ID_HEADER.upper(), "other")]

    class Pairs:
        def items(self):
            return pairs
    with pytest.raises(WebhookSignatureInvalid) as err:
        verify(Pairs(), b"x", "s", clock=at(NOW_S))
    assert err.value.code == "X_WEBHOOK_SIGNATURE_MISSING" and "twice" in str(err.value)


@pytest.mark.parametrize("tolerance", [math.nan, math.inf, -1, 0, True, "soon", "-5m", None])
def test_the_tolerance_knob_is_refused_unless_a_positive_finite_duration(tolerance):
    headers = signed_headers("s", NOW_S, "e", "t", b"x")
    with pytest.raises(InvalidOption) as err:
        verify(headers, b"x", "s", tolerance=tolerance, clock=at(NOW_S))
    assert err.value.code == "X_INVALID_OPTION" and err.value.option == "tolerance"


@pytest.mark.parametrize("field, value", [("event_id", "a:b"), ("event_id", ""), ("topic", "a b"),
                                          ("topic", "x\n"), ("topic", 5), ("event_id", "x" * 257),
                                          ("topic", "caf\u00e9")])
def test_fields_that_would_make_the_signed_string_ambiguous_are_refused(field, value):
    args = {"event_id": "e", "topic": "t", field: value}
    with pytest.raises(InvalidOption) as err:
        signature("s", NOW_S, args["event_id"], args["topic"], "x")
    assert err.value.option == field


@pytest.mark.parametrize("secret", ["", b"", None, 5])
def test_an_empty_or_odd_secret_is_refused(secret):
    with pytest.raises(InvalidOption) as err:
        signature(secret, NOW_S, "e", "t", "x")
    assert err.value.option == "secret"
    with pytest.raises(InvalidOption):
        verify(signed_headers("s", NOW_S, "e", "t", b"x"), b"x", secret, clock=at(NOW_S))


def test_an_endpoints_repr_shows_none_of_its_secrets():
    endpoint = WebhookEndpoint(url="https://hooks.example/T0/B0/tok3n?key=k3y", secret="whsec_s3cret",
                               headers={"authorization": "Bearer b3arer"})
    for text in (repr(endpoint), str(endpoint), f"{endpoint!r}"):
        assert not any(s in text for s in ("tok3n", "k3y", "s3cret", "b3arer", "hooks.example")), text


@pytest.mark.parametrize("make, option", [
    (lambda: WebhookEndpoint(url=None, secret="s"), "endpoint.url"),  # type: ignore[arg-type]
    (lambda: WebhookEndpoint(url="https://x", secret=""), "endpoint.secret"),
    (lambda: WebhookEndpoint(url="https://x", secret="s", headers=[("a", "b")]),  # type: ignore[arg-type]
     "endpoint.headers"),
    (lambda: WebhookEndpoint(url="https://x", secret="s", enabled=1), "endpoint.enabled"),  # type: ignore[arg-type]
    (lambda: WebhookEvent(topic="a:b", body="{}"), "event.topic"),
    (lambda: WebhookEvent(topic="t", body=b"{}"), "event.body"),  # type: ignore[arg-type]
    (lambda: WebhookEvent(topic="t", body="{}", content_type="text/plain\r\nx-evil: 1"), "event.content_type"),
])
def test_endpoints_and_events_are_checked_when_built(make, option):
    with pytest.raises(InvalidOption) as err:
        make()
    assert err.value.option == option
