"""Trace context across the queue: the W3C ``traceparent`` of the code that enqueued a job is
stored with it (at enqueue, and at outbox staging, never later: the relay publishes with no
request in scope) and restored around its run.

With the ``otel`` extra installed (``opentelemetry-api``), the current span's context is what
an enqueue captures, and each run is a span (``job NAME``, kind consumer) LINKED to the span
that enqueued it, with the job's attributes; an exception that ends the body is recorded on
it, while a suspension (a sleep or a wait) ends the span OK with a ``suspended`` event. Without it
nothing is imported, and the header is still carried: a job enqueued from
inside a run inherits that run's ``traceparent``.

An empty or invalid span context carries no header rather than a broken one.
"""

from __future__ import annotations

import contextlib
import math
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .context import Ctx

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def valid(traceparent: object) -> str | None:
    """``traceparent`` when it is a well-formed W3C header with non-zero ids, else None."""
    match = _parsed(traceparent)
    return None if match is None else match.string


def _parsed(traceparent: object) -> "re.Match[str] | None":
    if not isinstance(traceparent, str):
        return None
    match = _TRACEPARENT.match(traceparent)
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return None
    return match


@lru_cache(maxsize=1)
def _otel() -> Any:
    """``opentelemetry.trace`` when installed, else None (looked up once)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


@lru_cache(maxsize=4)
def _tracer(provider: Any) -> Any:
    """The xjobs tracer of ``provider`` (looked up once per provider, not per run)."""
    return provider.get_tracer("xjobs")


def current_traceparent() -> str | None:
    """What an enqueue stores: the current span's context, or else the running job's own."""
    trace = _otel()
    if trace is not None:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return valid(f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}")
    from .context import current
    run = current()
    return None if run is None else run.traceparent


@contextlib.contextmanager
def run_span(ctx: "Ctx") -> Iterator[Any]:
    """The span of one run, linked to its enqueue: yields it (None without opentelemetry)."""
    trace = _otel()
    # with the API alone (no SDK has set a provider, as when another package pulled the API
    # in) a span records nothing and leaves the current span invalid: skip it, on every run
    if trace is None or isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider,
                                                                  trace.NoOpTracerProvider)):
        yield None
        return
    links = []
    match = _parsed(ctx.traceparent)
    if match is not None:
        links.append(trace.Link(trace.SpanContext(int(match.group(1), 16), int(match.group(2), 16),
                                                  is_remote=True,
                                                  trace_flags=trace.TraceFlags(int(match.group(3), 16)))))
    attributes = {"xjobs.job_id": ctx.job_id, "xjobs.job": ctx.name, "xjobs.queue": ctx.queue,
                  "xjobs.attempt": ctx.attempt}
    if ctx.tenant is not None:
        attributes["xjobs.tenant"] = ctx.tenant
    tracer = _tracer(trace.get_tracer_provider())
    # the span records the body's exception itself, guarded: an exception whose __str__ raises
    # must still reach the settlement as itself, never as the tracer's error
    with tracer.start_as_current_span(f"job {ctx.name}", kind=trace.SpanKind.CONSUMER, links=links,
                                      attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            try:
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            except Exception:
                pass
            raise


def mark_suspended(span: Any, step: str, wake_at_ms: float | None) -> None:
    """A suspension (``ctx.step.sleep`` / ``wait_for_event``) is a normal end of an attempt: the
    run's span ends OK with a ``suspended`` event, never as an exception."""
    if span is None:
        return
    trace = _otel()
    attributes: dict[str, Any] = {"xjobs.step": step}
    if wake_at_ms is not None and math.isfinite(wake_at_ms):
        attributes["xjobs.wake_at_ms"] = wake_at_ms
    try:
        span.add_event("suspended", attributes)
        span.set_status(trace.Status(trace.StatusCode.OK))
    except Exception:
        pass


__all__ = ["current_traceparent", "mark_suspended", "run_span", "valid"]
