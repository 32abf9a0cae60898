"""``webhook()``: one job that delivers ONE event to ONE endpoint, signed, over HTTP.

The unit is the endpoint, not the event: retries, backoff and disabling after N failures are
facts about one endpoint, and a body that looped over every subscriber would retry all of
them because one was down. Which endpoints exist is the app's, so the fan-out is the app's
loop, one ``enqueue`` per endpoint, keyed ``<name>:<endpoint_id>:<event_id>`` (a key on the
event alone would fold every subscriber's delivery into the first one's row).

The job's input is ids only, refused otherwise. The endpoint (URL, secret, headers) is read
from the app on every attempt and never written anywhere: the body takes no step, because a
step's result is a row. The signature's timestamp is taken at send, on every attempt. Every
attempt that reached the sending stage is recorded in the app's ledger before its failure
is raised; the count the ledger answers is what disables the endpoint.

A disabled endpoint (or one, or an event, the app no longer has) ends the job COMPLETED as
skipped, not dead: nothing failed, the app decided, and a dead-letter list filling up with
every event of a switched-off endpoint would hide the deliveries that did fail. The result
says ``{"delivered": false, "skipped": "endpoint_disabled"}``. The attempt that disables
the endpoint is itself dead (``X_WEBHOOK_DISABLED``): that delivery failed.
"""

from __future__ import annotations

import asyncio
import time
from numbers import Integral
from typing import Callable

from ..clock import SYSTEM_CLOCK, Clock
from ..context import Ctx
from ..errors import DuplicateJob, InvalidOption, UnknownJob, WebhookFailed, WebhookRefused
from ..options import duration_ms, finite_count, plain_name
from ..registry import NO_TENANT, REGISTRY, JobHandle, Registry, declaration_site, job
from ..retry import Retry
from ..webhook_signature import check_field, signed_headers
from ..webhooks import WebhookAttempt, WebhookEndpoint, WebhookEvent, WebhookLedger
from .webhook_http import Timeouts, httpx_module, invalid, judge, post, request_headers

# 30s, 1m, 2m, ... to an hour apart: about three hours of an endpoint being down before dead
DEFAULT_WEBHOOK_RETRY = Retry(attempts=10, delay="30s", max_delay="1h", backoff="exponential", jitter=True)
_INPUT_KEYS = ("endpoint_id", "event_id", "tenant")
_MAX_TIMEOUT_MS = 10 * 60_000.0

EndpointSource = Callable[[str], "WebhookEndpoint | None"]
EventSource = Callable[[str], "WebhookEvent | None"]


def _id(value: object, what: str) -> str:
    """An endpoint or event id: a string, or a whole number written as one."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        value = str(value)
    return check_field(value, what)


def webhook_input(value: object) -> dict[str, str]:
    """The input as stored: ``endpoint_id`` and ``event_id`` (and ``tenant`` when the app
    scopes by it), nothing else, so no URL or secret is ever put in a job row."""
    if not isinstance(value, dict):
        raise InvalidOption("input", f"a webhook's input is a dict of ids, got {type(value).__name__}")
    extra = sorted(set(value) - set(_INPUT_KEYS))
    if extra:
        raise InvalidOption("input", f"a webhook's input holds ids only ({', '.join(_INPUT_KEYS)}); "
                                     f"not {', '.join(map(str, extra))}: the endpoint is read from the app")
    checked = {"endpoint_id": _id(value.get("endpoint_id"), "endpoint_id"),
               "event_id": _id(value.get("event_id"), "event_id")}
    if "tenant" in value:
        checked["tenant"] = plain_name(value["tenant"], "tenant")
    return checked


def _timeout(value: object, what: str) -> float:
    return duration_ms(value, what, exclusive_minimum=True, maximum_ms=_MAX_TIMEOUT_MS) / 1000.0


def _callable(value: object, what: str, shape: str) -> None:
    if not callable(value):
        raise InvalidOption(what, f"must be a callable: {shape}")


def webhook(*, name: str, endpoint: EndpointSource, event: EventSource, ledger: WebhookLedger,
            max_failures: int = 10, queue: str = "webhooks", tenant: object = NO_TENANT,
            retry: Retry | None = None, connect_timeout: object = "5s", read_timeout: object = "10s",
            total_timeout: object = "20s", timeout: object = "2m", clock: Clock | None = None,
            registry: Registry | None = None) -> JobHandle:
    """Declare a webhook delivery job; answers its ``JobHandle``::

        deliver = xjobs.webhook(name="order_events", endpoint=load_endpoint, event=load_event,
                                ledger=ledger, max_failures=10)
        for endpoint_id in subscribers("order.paid"):
            deliver.enqueue({"endpoint_id": endpoint_id, "event_id": event_id})

    ``endpoint(endpoint_id)`` answers a ``WebhookEndpoint`` (or None: gone) and ``event(event_id)``
    a ``WebhookEvent`` (or None: gone), on every attempt, in a worker thread. ``ledger`` is the
    app's ``WebhookLedger``; at ``max_failures`` consecutive failures ``ledger.disable`` is
    called. ``connect_timeout``, ``read_timeout`` (between bytes) and ``total_timeout`` bound
    one exchange; ``timeout`` bounds the whole attempt, the app's callables included.
    ``clock`` (epoch milliseconds) is what the signature's timestamp is read from.

    ``total_timeout`` defaults to less than the daemon's default drain deadline (25s), so a
    drain lets a delivery in flight finish rather than abandon it to be sent again."""
    _callable(endpoint, "endpoint", "endpoint_id -> WebhookEndpoint | None")
    _callable(event, "event", "event_id -> WebhookEvent | None")
    for verb in ("record", "disable"):
        if not callable(getattr(ledger, verb, None)):
            raise InvalidOption("ledger", f"must be a WebhookLedger: it has no {verb}() method")
    limit = finite_count(max_failures, "max_failures", minimum=1, maximum=1_000_000)
    connect_s = _timeout(connect_timeout, "connect_timeout")
    read_s = _timeout(read_timeout, "read_timeout")
    total_s = _timeout(total_timeout, "total_timeout")
    if total_s < max(connect_s, read_s):
        raise InvalidOption("total_timeout", "must be at least connect_timeout and read_timeout")
    if duration_ms(timeout, "timeout", exclusive_minimum=True) / 1000.0 <= total_s:
        raise InvalidOption("timeout", "must be longer than total_timeout: it also bounds the app's callables")
    httpx_module()   # refused at declaration, not at the first delivery
    job_name = plain_name(name, "name")
    timeouts = Timeouts(connect_s=connect_s, read_s=read_s, total_s=total_s)
    sender = _Sender(endpoint, event, ledger, limit, timeouts, clock or SYSTEM_CLOCK)

    async def deliver(ctx: Ctx, input: dict[str, str]) -> dict[str, object]:
        return await sender.deliver(ctx, input["endpoint_id"], input["event_id"])

    deliver.__name__ = deliver.__qualname__ = job_name
    deliver.__doc__ = f"webhook(): deliver one event to one endpoint ({job_name})"
    _one_declaration(registry or REGISTRY, job_name, deliver, endpoint, event)
    return job(name=job_name, queue=queue, tenant=tenant, retry=retry or DEFAULT_WEBHOOK_RETRY,
               timeout=timeout, input=webhook_input, registry=registry,
               idempotency_key=lambda i: f"{job_name}:{i['endpoint_id']}:{i['event_id']}")(deliver)


def _one_declaration(registry: Registry, name: str, body: Callable[..., object],
                     endpoint: EndpointSource, event: EventSource) -> None:
    """Every webhook body is written in this module, so the registry alone would take two
    declarations under one name for one: they are told apart by the app's callables (the same
    module imported twice reads the same ones again, and is one declaration)."""
    sources = tuple(declaration_site(fn) or id(fn) for fn in (endpoint, event))
    setattr(body, "_webhook_sources", sources)
    try:
        existing = registry.get(name)
    except UnknownJob:
        return
    if getattr(existing.fn, "_webhook_sources", None) != sources:
        raise DuplicateJob(f"two different declarations of the job name {name!r}, one of them by webhook()")


class _Sender:
    """One attempt of one delivery, with what the declaration fixed."""

    def __init__(self, endpoint: EndpointSource, event: EventSource, ledger: WebhookLedger,
                 max_failures: int, timeouts: Timeouts, clock: Clock) -> None:
        self._endpoint, self._event, self._ledger = endpoint, event, ledger
        self._max_failures, self._timeouts, self._clock = max_failures, timeouts, clock

    async def deliver(self, ctx: Ctx, endpoint_id: str, event_id: str) -> dict[str, object]:
        target = await asyncio.to_thread(self._endpoint, endpoint_id)
        if target is None:
            return _skipped(ctx, "endpoint_gone", endpoint_id, event_id)
        if not isinstance(target, WebhookEndpoint):
            raise InvalidOption("endpoint", f"endpoint() must answer a WebhookEndpoint or None, "
                                            f"got {type(target).__name__}")
        if not target.enabled:
            return _skipped(ctx, "endpoint_disabled", endpoint_id, event_id)
        fact = await asyncio.to_thread(self._event, event_id)
        if fact is None:
            return _skipped(ctx, "event_gone", endpoint_id, event_id)
        if not isinstance(fact, WebhookEvent):
            raise InvalidOption("event", f"event() must answer a WebhookEvent or None, got {type(fact).__name__}")
        topic = fact.topic
        ctx.signal.raise_if_set()     # stopping (a drain, a cancel): send nothing now
        sent_at = int(self._clock.now_ms() // 1000)   # SEND time, on every attempt
        started = time.monotonic()
        status: int | None = None
        failure: WebhookFailed | None
        try:
            body = fact.body.encode()
            headers = request_headers(target, _signed(target, sent_at, event_id, topic, body),
                                      fact.content_type)
            answer = await post(target, headers, body, self._timeouts)
            status, failure = answer.status, judge(answer)
        except WebhookFailed as exc:
            failure = exc
        attempt = WebhookAttempt(
            endpoint_id=endpoint_id, event_id=event_id, topic=topic, job_id=ctx.job_id,
            attempt=ctx.attempt, sent_at=sent_at, delivered=failure is None, status=status,
            code=None if failure is None else failure.code,
            error=None if failure is None else str(failure.args[0]),
            seconds=round(time.monotonic() - started, 6))
        failures = await asyncio.to_thread(self._ledger.record, attempt)   # before any raise
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 0:
            raise InvalidOption("ledger", f"record() must answer the count of consecutive failures, "
                                          f"got {failures!r}")
        if failure is None:
            return {"delivered": True, "status": status}
        if failure.code == "X_WEBHOOK_GONE":
            await asyncio.to_thread(self._ledger.disable, endpoint_id, str(failure))
            raise failure
        if failures >= self._max_failures:
            reason = f"{failures} consecutive failures (max_failures={self._max_failures}); the last: {failure}"
            await asyncio.to_thread(self._ledger.disable, endpoint_id, reason)
            raise WebhookRefused(f"the endpoint is disabled: {reason}", code="X_WEBHOOK_DISABLED",
                                 status=failure.status)
        raise failure


def _signed(target: WebhookEndpoint, sent_at: int, event_id: str, topic: str, body: bytes) -> dict[str, str]:
    secret = target.secret
    if not isinstance(secret, (str, bytes)) or not secret:
        raise invalid("its secret is not a non-empty str or bytes")
    return signed_headers(secret, sent_at, event_id, topic, body)


def _skipped(ctx: Ctx, why: str, endpoint_id: str, event_id: str) -> dict[str, object]:
    ctx.log.info("webhook not sent: %s", why.replace("_", " "),
                 extra={"endpoint_id": endpoint_id, "event_id": event_id, "skipped": why})
    return {"delivered": False, "skipped": why}


__all__ = ["DEFAULT_WEBHOOK_RETRY", "webhook", "webhook_input"]
