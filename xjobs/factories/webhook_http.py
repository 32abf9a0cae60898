"""One webhook POST over ``httpx``: the request's headers, the exchange under its timeouts,
and what the answer means.

Nothing the endpoint is made of (URL, headers, secret) may reach a message, a log line or a
traceback: a webhook URL is often a credential by itself (a path with a token in it), and its
headers carry ``Authorization``. So every failure here is raised ``from None`` (no chained
exception of the client's, whose text may quote the URL), its text is scrubbed of those
values, and httpx's own request log is silenced for our requests alone.

Redirects are never followed: following one would send a body signed for one receiver to
wherever that receiver points, signature and all. A 3xx is a failed delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import importlib
import logging
import re
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Mapping

from ..errors import ExtraMissing, WebhookFailed, WebhookRefused, WebhookThrottled
from ..webhook_signature import HEADERS
from ..webhooks import WebhookEndpoint

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")   # an HTTP header name (RFC 9110 token)
# what the framework says about the request: an endpoint's headers never replace these
_OURS = frozenset({*HEADERS, "content-type", "content-length", "host", "transfer-encoding",
                   "connection"})
_REDACTED = "<redacted>"
_SENDING: contextvars.ContextVar[bool] = contextvars.ContextVar("xjobs_webhook_sending", default=False)
_CLIENT_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy")
_filter_installed = False
_tls: list[object] = []     # one TLS context per process: building one reads the CA bundle (~35 ms)


@dataclass(frozen=True)
class Timeouts:
    """Seconds: to connect, between bytes (read and write), and for the whole exchange."""

    connect_s: float
    read_s: float
    total_s: float


@dataclass(frozen=True)
class Answer:
    status: int
    retry_after_s: float | None


def httpx_module() -> ModuleType:
    """httpx, imported when first needed: an app without webhooks does not need it."""
    try:
        return importlib.import_module("httpx")
    except ImportError:
        raise ExtraMissing("webhook() needs httpx: pip install 'xjobsd[webhook]'",
                           hint="pip install 'xjobsd[webhook]'") from None


def _quiet(record: logging.LogRecord) -> bool:
    return not _SENDING.get()


def _install_filter() -> None:
    """httpx logs every request with its full URL at INFO: not ours, while we send."""
    global _filter_installed
    if not _filter_installed:
        for name in _CLIENT_LOGGERS:
            logging.getLogger(name).addFilter(_quiet)
        _filter_installed = True


def _tls_context(httpx: ModuleType) -> object:
    """httpx's own default context (its CA bundle), built once and shared: it is thread-safe."""
    if not _tls:
        _tls.append(httpx.create_ssl_context())
    return _tls[0]


def request_headers(endpoint: WebhookEndpoint, signed: Mapping[str, str], content_type: str) -> dict[str, str]:
    """The endpoint's own headers beneath the framework's: a stored header named like one of
    the signature's is dropped, whatever its case, so no stored row can forge a signature."""
    given = endpoint.headers
    if not isinstance(given, Mapping):
        raise invalid("its headers are not a mapping of names to values")
    merged: dict[str, str] = {}
    for n, (key, value) in enumerate(given.items(), 1):
        if not isinstance(key, str) or not _TOKEN.match(key):
            raise invalid(f"its header #{n} has no valid name")
        # printable ASCII: the client refuses anything else with an error quoting the value
        if not isinstance(value, str) or any(not (32 <= ord(ch) <= 126 or ch == "\t") for ch in value):
            raise invalid(f"its header {key!r} has a value that is not one line of printable ASCII")
        if key.lower() not in _OURS:
            merged[key] = value
    return {**merged, "content-type": content_type, **signed}


def invalid(why: str) -> WebhookFailed:
    return WebhookFailed(f"the endpoint cannot be sent to: {why}", code="X_WEBHOOK_ENDPOINT_INVALID")


def _scrub(text: str, hidden: list[str]) -> str:
    for value in sorted(hidden, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, _REDACTED)
    return text


def _hidden(endpoint: WebhookEndpoint, url: str) -> list[str]:
    """What an error text may not show: the URL (whole as given and as parsed; everything
    after its scheme; its path, query and password alone), the secret and every header value."""
    secret = endpoint.secret
    values = [endpoint.url, url, secret.decode(errors="replace") if isinstance(secret, bytes) else secret]
    values += [v for v in endpoint.headers.values() if isinstance(v, str)]
    tail = url.split("://", 1)[-1]
    values += [tail, tail.partition("/")[2], url.partition("?")[2]]
    with contextlib.suppress(Exception):
        parsed = httpx_module().URL(url)
        values += [parsed.path, parsed.query.decode(errors="replace"), parsed.password or ""]
    return [v for v in values if isinstance(v, str)]


def checked_url(endpoint: WebhookEndpoint) -> str:
    httpx = httpx_module()
    if not isinstance(endpoint.url, str):
        raise invalid("its url is not a string")
    try:
        url = httpx.URL(endpoint.url)
    except Exception:   # its text quotes the URL: say what, not which
        raise invalid("its url does not parse") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise invalid("its url is not an http:// or https:// URL with a host")
    return str(url)


async def post(endpoint: WebhookEndpoint, headers: dict[str, str], body: bytes,
               timeouts: Timeouts) -> Answer:
    """POST once; answers the status (and a Retry-After in seconds), or raises
    ``WebhookFailed`` (``X_WEBHOOK_TIMEOUT``, ``X_WEBHOOK_UNREACHABLE``). The answer's body is
    never read: a receiver cannot make us hold or store what it sends back."""
    httpx = httpx_module()
    url = checked_url(endpoint)
    _install_filter()
    limits = httpx.Timeout(connect=timeouts.connect_s, read=timeouts.read_s, write=timeouts.read_s,
                           pool=timeouts.connect_s)
    token = _SENDING.set(True)
    failure: WebhookFailed | None = None
    try:
        async with asyncio.timeout(timeouts.total_s):
            async with httpx.AsyncClient(follow_redirects=False, timeout=limits, verify=_tls_context(httpx)) as client:
                async with client.stream("POST", url, content=body, headers=headers) as response:
                    return Answer(int(response.status_code), retry_after(response.headers.get("retry-after")))
    except TimeoutError:
        failure = WebhookFailed(f"no answer within the total timeout of {timeouts.total_s:g}s",
                                code="X_WEBHOOK_TIMEOUT")
    except httpx.TimeoutException as exc:
        failure = WebhookFailed(f"{type(exc).__name__}: no progress within its timeout", code="X_WEBHOOK_TIMEOUT")
    except Exception as exc:   # transport, protocol, and whatever else the client raises: all scrubbed
        said = _scrub(str(exc), _hidden(endpoint, url)) or "no detail"
        failure = WebhookFailed(f"{type(exc).__name__}: {said}", code="X_WEBHOOK_UNREACHABLE")
    finally:
        _SENDING.reset(token)
    # raised here, outside the handlers, so it carries no context of the client's exception
    assert failure is not None
    raise failure


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` as seconds from now: a whole number, or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    with contextlib.suppress(TypeError, ValueError, IndexError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return None


def judge(answer: Answer) -> WebhookFailed | None:
    """What an answer means: None (2xx, delivered) or the failure to raise.

    2xx delivered. 3xx failed (not followed). 410 Gone is dead at once and disables the
    endpoint: the receiver says it is not coming back. 413 is dead at once: this body will
    never fit. 429, and 503 with a Retry-After, come back when told. Everything else (other
    4xx, 5xx) is retried by the job's policy: the endpoint is read again on every attempt, so
    a fixed URL or a rotated secret makes the next one succeed."""
    status = answer.status
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return WebhookFailed(f"answered {status}, a redirect: not followed", code="X_WEBHOOK_REDIRECT",
                             status=status)
    if status == 410:
        return WebhookRefused(f"answered {status} Gone: the endpoint is disabled", code="X_WEBHOOK_GONE",
                              status=status)
    if status == 413:
        return WebhookRefused(f"answered {status}: the body is too large for this receiver",
                              code="X_WEBHOOK_TOO_LARGE", status=status)
    if status in (429, 503) and answer.retry_after_s is not None:
        return WebhookThrottled(f"answered {status}, retry after {answer.retry_after_s:g}s",
                                seconds=answer.retry_after_s, code="X_WEBHOOK_STATUS", status=status)
    return WebhookFailed(f"answered {status}", code="X_WEBHOOK_STATUS", status=status)


__all__ = ["Answer", "Timeouts", "checked_url", "httpx_module", "invalid", "judge", "post",
           "request_headers", "retry_after"]
