"""The webhook wire format, stated once: the canonical string, its MAC, the header names and
the parse a receiver does.

A delivery is signed over ``v1:<timestamp>:<event_id>:<topic>:<body>`` with HMAC-SHA256 and
the endpoint's secret. The sender (``webhook()``, whose body is ``str``) and the receiver
(``verify``, which reads ``bytes`` off the wire) both go through ``signature()``: a second
spelling of the canonical string is how a sender and a receiver drift apart while each one's
tests stay green. The event id and the topic are printable ASCII without ``:`` (they travel
in headers too), so the string splits one way only; the body comes last and may hold anything.

The timestamp is whole seconds since the epoch, taken when the request is sent, so a
receiver's tolerance measures the request and a replay of a captured request goes stale.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Union

from .clock import SYSTEM_CLOCK, Clock
from .errors import InvalidOption, WebhookSignatureInvalid
from .options import duration_ms

VERSION = "v1"
ID_HEADER = "xjobs-webhook-id"
TOPIC_HEADER = "xjobs-webhook-topic"
TIMESTAMP_HEADER = "xjobs-webhook-timestamp"
SIGNATURE_HEADER = "xjobs-webhook-signature"
HEADERS = (ID_HEADER, TOPIC_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
DEFAULT_TOLERANCE = "5m"

_FIELD_MAX = 256
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_ENTRY = re.compile(r"^v1=([0-9a-f]{64})$")
_OWS = " \t"    # what HTTP allows around a header's value

Secret = Union[str, bytes]


class _Headers(Protocol):
    """Anything with ``items()`` of name and value: a dict, ``http.server``'s message,
    werkzeug's, Django's or Starlette's headers."""

    def items(self) -> Iterable[tuple[str, str]]: ...


@dataclass(frozen=True)
class Verified:
    """A request ``verify`` accepted: who sent what, when (the body exactly as received)."""

    event_id: str
    topic: str
    timestamp: int
    body: bytes


def check_field(value: object, what: str) -> str:
    """An event id or a topic as the canonical string may hold it."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise InvalidOption(what, f"must be a string, got {type(value).__name__}")
    if not value or len(value) > _FIELD_MAX:
        raise InvalidOption(what, f"must be 1 to {_FIELD_MAX} characters, got {len(value)}")
    # printable ASCII: it travels in a header, which carries no other text faithfully
    if ":" in value or any(not 33 <= ord(ch) <= 126 for ch in value):
        raise InvalidOption(what, "must be printable ASCII without ':' or spaces "
                                  "(it travels in a header, and the signed string is split on ':')")
    return value


def _secret_bytes(secret: object) -> bytes:
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or not secret:
        raise InvalidOption("secret", "must be a non-empty str or bytes")
    return secret


def canonical(timestamp: int, event_id: str, topic: str, body: str | bytes) -> bytes:
    """The bytes the MAC covers. ``body`` as ``str`` is its UTF-8 encoding, which is what the
    sender puts on the wire; a receiver passes the raw ``bytes`` it read."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise InvalidOption("timestamp", f"must be whole seconds since the epoch, got {timestamp!r}")
    raw = body.encode() if isinstance(body, str) else body
    if not isinstance(raw, bytes):
        raise InvalidOption("body", f"must be str or bytes, got {type(body).__name__}")
    head = f"{VERSION}:{timestamp}:{check_field(event_id, 'event_id')}:{check_field(topic, 'topic')}:"
    return head.encode() + raw


def signature(secret: Secret, timestamp: int, event_id: str, topic: str, body: str | bytes) -> str:
    """The hex HMAC-SHA256 of ``canonical(...)``: the one function both sides call."""
    return hmac.new(_secret_bytes(secret), canonical(timestamp, event_id, topic, body),
                    hashlib.sha256).hexdigest()


def signed_headers(secret: Secret, timestamp: int, event_id: str, topic: str,
                   body: str | bytes) -> dict[str, str]:
    """The four headers a delivery carries."""
    mac = signature(secret, timestamp, event_id, topic, body)
    return {ID_HEADER: event_id, TOPIC_HEADER: topic, TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: f"{VERSION}={mac}"}


def _refused(code: str, message: str) -> WebhookSignatureInvalid:
    return WebhookSignatureInvalid(message, code=code)


def _lowered(headers: _Headers | Mapping[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in headers.items():
        key = str(name).lower()
        if key in HEADERS:
            if key in found:   # two of one header: which one was signed is anybody's guess
                raise _refused("X_WEBHOOK_SIGNATURE_MISSING", f"the header {key} is given twice")
            found[key] = str(value)
    return found


def verify(headers: _Headers | Mapping[str, str], body: bytes | str, secret: Secret, *,
           tolerance: object = DEFAULT_TOLERANCE, clock: Clock | None = None) -> Verified:
    """Check a delivery as a receiver reads it: ``headers`` (any case), the raw ``body`` and
    the endpoint's ``secret``. Answers what was verified, or raises
    ``WebhookSignatureInvalid`` with ``X_WEBHOOK_SIGNATURE_MISSING``, ``..._STALE`` (a
    timestamp further than ``tolerance`` from now, past or future) or ``..._MISMATCH``.

    ``tolerance`` is a duration (``"5m"``; a bare number is milliseconds, as everywhere in
    xjobs). Pass the body exactly as read, before any JSON parsing: re-encoding changes it."""
    window_s = duration_ms(tolerance, "tolerance", exclusive_minimum=True) / 1000.0
    secret_bytes = _secret_bytes(secret)
    raw = body.encode() if isinstance(body, str) else body
    if not isinstance(raw, bytes):
        raise InvalidOption("body", f"must be bytes (as read) or str, got {type(body).__name__}")
    given = _lowered(headers)
    missing = [name for name in HEADERS if name not in given]
    if missing:
        raise _refused("X_WEBHOOK_SIGNATURE_MISSING", f"missing header(s): {', '.join(missing)}")
    stamp = given[TIMESTAMP_HEADER].strip(_OWS)
    if not _TIMESTAMP.match(stamp):
        raise _refused("X_WEBHOOK_SIGNATURE_MISSING", f"{TIMESTAMP_HEADER} is not whole seconds")
    try:
        event_id = check_field(given[ID_HEADER].strip(_OWS), "event_id")
        topic = check_field(given[TOPIC_HEADER].strip(_OWS), "topic")
    except InvalidOption as exc:
        raise _refused("X_WEBHOOK_SIGNATURE_MISSING", f"malformed header: {exc.option} {exc.reason}") from None
    entries = [entry for entry in re.split(r"[, \t]+", given[SIGNATURE_HEADER]) if entry]
    macs = [m.group(1) for m in map(_ENTRY.match, entries) if m is not None]
    if not macs:   # other versions may sit beside v1 one day; v1 must be among them
        raise _refused("X_WEBHOOK_SIGNATURE_MISSING", f"{SIGNATURE_HEADER} holds no {VERSION}=<hex>")
    timestamp = int(stamp)
    age_s = (clock or SYSTEM_CLOCK).now_ms() / 1000.0 - timestamp
    if abs(age_s) > window_s:
        when = f"{age_s:.0f}s ago" if age_s > 0 else f"{-age_s:.0f}s in the future"
        raise _refused("X_WEBHOOK_SIGNATURE_STALE", f"signed {when}, beyond the tolerance of {window_s:g}s")
    expected = signature(secret_bytes, timestamp, event_id, topic, raw)
    # every entry is compared, so how long this takes says nothing about which one was close
    matched = [hmac.compare_digest(expected.encode(), mac.encode()) for mac in macs]
    if not any(matched):
        raise _refused("X_WEBHOOK_SIGNATURE_MISMATCH", "the signature does not match the body under this secret")
    return Verified(event_id=event_id, topic=topic, timestamp=timestamp, body=raw)


__all__ = ["DEFAULT_TOLERANCE", "HEADERS", "ID_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER",
           "TOPIC_HEADER", "VERSION", "Verified", "canonical", "check_field", "signature",
           "signed_headers", "verify"]
