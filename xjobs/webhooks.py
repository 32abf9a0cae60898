"""``xjobs.webhooks``: what an application hands ``xjobs.webhook()`` and reads back, and what
its receivers call.

- ``WebhookEndpoint`` (URL, secret, headers, enabled) is what the app's ``endpoint(id)``
  answers on every attempt; it is never stored, and its ``repr`` shows none of it.
- ``WebhookEvent`` (topic, body) is what the app's ``event(id)`` answers.
- ``WebhookAttempt`` is one delivery attempt as the ledger records it: ids, status, outcome,
  never the URL, headers or secret.
- ``WebhookLedger`` is the seam the app owns: ``record(attempt)`` stores an attempt and
  answers the endpoint's consecutive failures counting it, ``disable(endpoint_id, reason)``
  stops deliveries to it. ``MemoryLedger`` is one for tests and examples.
- ``verify(headers, body, secret, tolerance=)`` checks a delivery on the receiving side
  (``xjobs/webhook_signature.py`` is the wire format both sides share).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from .errors import InvalidOption
from .webhook_signature import (DEFAULT_TOLERANCE, HEADERS, ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER,
                                TOPIC_HEADER, Verified, canonical, check_field, signature, signed_headers,
                                verify)


@dataclass(frozen=True, repr=False)
class WebhookEndpoint:
    """Where one endpoint's deliveries go, read from the app on every attempt. ``headers``
    are sent beneath the signature's own (one of those names here is ignored), ``enabled``
    False ends a delivery without sending."""

    url: str
    secret: str | bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True

    def __post_init__(self) -> None:
        # types only, and said without the values: a refusal's text is logged like any other
        if not isinstance(self.url, str):
            raise InvalidOption("endpoint.url", f"must be a string, got {type(self.url).__name__}")
        if not isinstance(self.secret, (str, bytes)) or not self.secret:
            raise InvalidOption("endpoint.secret", "must be a non-empty str or bytes")
        if not isinstance(self.headers, Mapping):
            raise InvalidOption("endpoint.headers", f"must be a mapping, got {type(self.headers).__name__}")
        if not isinstance(self.enabled, bool):
            raise InvalidOption("endpoint.enabled", f"must be True or False, got {type(self.enabled).__name__}")

    def __repr__(self) -> str:
        # a repr lands in logs, tracebacks and error reports: none of these fields may
        return (f"WebhookEndpoint(url=<redacted>, secret=<redacted>, "
                f"headers=<{len(self.headers)} redacted>, enabled={self.enabled!r})")


@dataclass(frozen=True)
class WebhookEvent:
    """One event as delivered: the signed ``topic`` and ``body`` (sent as UTF-8)."""

    topic: str
    body: str
    content_type: str = "application/json"

    def __post_init__(self) -> None:
        check_field(self.topic, "event.topic")
        if not isinstance(self.body, str):
            raise InvalidOption("event.body", f"must be a str (sent as UTF-8), got {type(self.body).__name__}")
        if (not isinstance(self.content_type, str) or not self.content_type
                or any(not 32 <= ord(ch) <= 126 for ch in self.content_type)):
            raise InvalidOption("event.content_type", "must be one line of printable ASCII")


@dataclass(frozen=True)
class WebhookAttempt:
    """One attempt to deliver ``event_id`` to ``endpoint_id``, as the ledger records it.

    ``sent_at`` is the signature's timestamp (epoch seconds); ``status`` the HTTP status when
    the endpoint answered; ``code`` and ``error`` say how it failed (None when delivered), in
    words that never hold the URL, the headers or the secret."""

    endpoint_id: str
    event_id: str
    topic: str
    job_id: int
    attempt: int
    sent_at: int
    delivered: bool
    status: int | None
    code: str | None
    error: str | None
    seconds: float


class WebhookLedger(Protocol):
    """The app's record of deliveries (its schema and retention are the app's to choose).

    ``record`` is called for every attempt, delivered or not, before a failure is raised;
    it answers the endpoint's consecutive failures including this attempt (0 after a
    delivery). That count is what disables the endpoint, so it must come from the same write
    that recorded the attempt, not from an earlier read. ``disable`` is called once that count
    reaches ``max_failures`` (or the endpoint answered 410): from then on the app's
    ``endpoint()`` should answer ``enabled=False``. Re-enabling is the app's."""

    def record(self, attempt: WebhookAttempt) -> int: ...

    def disable(self, endpoint_id: str, reason: str) -> None: ...


class MemoryLedger:
    """A ``WebhookLedger`` in this process's memory: for tests, examples and one-process apps."""

    def __init__(self) -> None:
        self.attempts: list[WebhookAttempt] = []
        self.disabled: dict[str, str] = {}     # endpoint id -> why
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def record(self, attempt: WebhookAttempt) -> int:
        with self._lock:
            self.attempts.append(attempt)
            count = 0 if attempt.delivered else self._failures.get(attempt.endpoint_id, 0) + 1
            self._failures[attempt.endpoint_id] = count
            return count

    def disable(self, endpoint_id: str, reason: str) -> None:
        with self._lock:
            self.disabled[endpoint_id] = reason

    def enabled(self, endpoint_id: str) -> bool:
        with self._lock:
            return endpoint_id not in self.disabled

    def enable(self, endpoint_id: str) -> None:
        """Deliver to it again, its count of failures started afresh."""
        with self._lock:
            self.disabled.pop(endpoint_id, None)
            self._failures.pop(endpoint_id, None)

    def failures(self, endpoint_id: str) -> int:
        with self._lock:
            return self._failures.get(endpoint_id, 0)


__all__ = ["DEFAULT_TOLERANCE", "HEADERS", "ID_HEADER", "MemoryLedger", "SIGNATURE_HEADER",
           "TIMESTAMP_HEADER", "TOPIC_HEADER", "Verified", "WebhookAttempt", "WebhookEndpoint",
           "WebhookEvent", "WebhookLedger", "canonical", "signature", "signed_headers", "verify"]
