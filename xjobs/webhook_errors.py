"""What a webhook delivery raises, and what a receiver's ``verify`` refuses.

Part of ``xjobs.errors`` (which names each of these too): kept beside the factory so that
module stays one page of the codes every caller meets.
"""

from __future__ import annotations

from .errors import RetryAfter, Terminal, XJobsError


class WebhookFailed(XJobsError):
    """One delivery attempt of ``webhook()`` failed; retried by the job's policy. ``code`` says
    how: ``X_WEBHOOK_STATUS`` (an answer other than 2xx), ``X_WEBHOOK_REDIRECT`` (a 3xx, never
    followed), ``X_WEBHOOK_TIMEOUT``, ``X_WEBHOOK_UNREACHABLE`` (no answer: refused, reset,
    DNS, TLS), ``X_WEBHOOK_ENDPOINT_INVALID`` (what the app's ``endpoint()`` answered cannot
    be sent to). ``status`` is the HTTP status when there was one. The message never holds the
    endpoint's URL, headers or secret."""

    code = "X_WEBHOOK_FAILED"

    def __init__(self, message: str, *, code: str, status: int | None = None) -> None:
        super().__init__(message, code=code, status=status)
        self.status = status


class WebhookRefused(WebhookFailed, Terminal):
    """A failed delivery that no retry can mend, so the job is dead at once:
    ``X_WEBHOOK_GONE`` (410: the receiver says the endpoint is gone, and it is disabled),
    ``X_WEBHOOK_TOO_LARGE`` (413: this body never fits), ``X_WEBHOOK_DISABLED`` (this failure
    was the endpoint's ``max_failures``-th in a row: it is disabled)."""


class WebhookThrottled(WebhookFailed, RetryAfter):
    """A 429 or 503 that said when to come back (``Retry-After``): retried then, within the
    job's ``max_delay``."""

    def __init__(self, message: str, *, seconds: float, code: str, status: int | None = None) -> None:
        WebhookFailed.__init__(self, message, code=code, status=status)
        self.seconds = seconds


class WebhookSignatureInvalid(XJobsError):
    """``xjobs.webhooks.verify`` refused a request: ``X_WEBHOOK_SIGNATURE_MISSING`` (a header
    is absent or malformed), ``X_WEBHOOK_SIGNATURE_STALE`` (its timestamp is further from now
    than the tolerance, either way), ``X_WEBHOOK_SIGNATURE_MISMATCH`` (no signature matches
    the body under the secret)."""

    code = "X_WEBHOOK_SIGNATURE_MISMATCH"
