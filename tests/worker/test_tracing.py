"""Trace context across the queue: the enqueuing span's traceparent is stored with the job and
each run is a span linked to it (opentelemetry present); without a span, no header."""

from __future__ import annotations

import contextlib

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

import xjobs
from xjobs.drivers.base import ListFilter
from xjobs.enqueue import enqueue_many
from xjobs.tracing import valid

from .pacing import Pacer, make_worker

EXPORTER = InMemorySpanExporter()


class Switch(Sampler):
    """Samples only while this module runs: opentelemetry takes a global provider once per
    process, and the rest of the suite must not pay for recording its spans."""

    on = False

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        return SamplingResult(Decision.RECORD_AND_SAMPLE if Switch.on else Decision.DROP, attributes)

    def get_description(self) -> str:
        return "Switch"


@pytest.fixture(scope="module", autouse=True)
def provider():
    """One SDK provider for the module, recording only while the module runs."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider(sampler=Switch())
        current.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(current)
    Switch.on = True
    yield
    Switch.on = False
    EXPORTER.clear()


@pytest.fixture(autouse=True)
def fresh_spans():
    EXPORTER.clear()
    yield


def test_a_run_is_a_span_linked_to_the_span_that_enqueued_it(driver, registry_and_jobs):
    registry, parent, child = registry_and_jobs
    with trace.get_tracer("app").start_as_current_span("checkout") as checkout:
        [job] = enqueue_many(parent, [{"n": 1}], driver=driver)
    enqueue_ctx = checkout.get_span_context()
    stored = driver.job_list(ListFilter())
    assert len(stored) == 1
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 2, advance_ms=100)
    runs = {s.name: s for s in EXPORTER.get_finished_spans() if s.name.startswith("job ")}
    span = runs["job parent"]
    assert span.kind == trace.SpanKind.CONSUMER
    assert [(l.context.trace_id, l.context.span_id) for l in span.links] == [(enqueue_ctx.trace_id,
                                                                               enqueue_ctx.span_id)]
    assert span.attributes["xjobs.job_id"] == job.id and span.attributes["xjobs.queue"] == "q"  # type: ignore[index]
    # the job enqueued from inside the run carries the run's span as its origin
    [link] = runs["job child"].links
    assert (link.context.trace_id, link.context.span_id) == (span.context.trace_id, span.context.span_id)


def test_without_a_span_no_header_is_stored_and_a_failure_is_recorded(driver, registry_and_jobs):
    registry, parent, child = registry_and_jobs
    boom = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry,
                     name="boom", retry=xjobs.Retry(attempts=1))(lambda ctx, i: 1 / 0)
    enqueue_many(boom, [{"n": 1}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    [span] = [s for s in EXPORTER.get_finished_spans() if s.name == "job boom"]
    assert span.links == () or list(span.links) == []
    assert span.status.status_code == trace.StatusCode.ERROR
    assert any(event.name == "exception" for event in span.events)


@pytest.mark.parametrize("header", [None, "", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
                                    "00-" + "a" * 32 + "-" + "0" * 16 + "-01", "01-" + "a" * 32 + "-" + "b" * 16 + "-01"])
def test_an_empty_or_invalid_context_carries_no_header(header):
    assert valid(header) is None
    assert valid("00-" + "a" * 32 + "-" + "b" * 16 + "-01") is not None


@pytest.fixture
def registry_and_jobs():
    registry = xjobs.Registry()
    child = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry,
                      name="child")(lambda ctx, i: None)

    def parent_body(ctx, i):
        enqueue_many(child, [{"n": i["n"]}], driver=ctx_driver[0])
    parent = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry,
                       name="parent")(parent_body)
    return registry, parent, child


ctx_driver: list = []


@pytest.fixture(autouse=True)
def remember_driver(driver):
    ctx_driver[:] = [driver]
    yield


def test_staging_in_the_outbox_stamps_the_stagers_context(driver, registry_and_jobs):
    from xjobs.outbox import stage
    registry, parent, child = registry_and_jobs
    conn = driver.connect() if hasattr(driver, "connect") else None
    try:
        with trace.get_tracer("app").start_as_current_span("signup") as signup:
            if conn is not None:
                with conn.transaction():
                    stage(conn, child, {"n": 5}, driver=driver)
            else:
                stage(None, child, {"n": 5}, driver=driver)
    finally:
        if conn is not None:
            conn.close()
    context = signup.get_span_context()
    [staged] = driver.outbox_claim("relay", 10, 30_000).jobs     # what the relay will enqueue
    assert staged.traceparent == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_park_is_an_ok_span_with_a_suspended_event_and_no_failure_for_the_apps_hook(driver, clock, kind):
    registry = xjobs.Registry()
    seen: list[object] = []

    @contextlib.contextmanager
    def hook(ctx):
        try:
            yield
        except BaseException as exc:     # what a session hook that rolls back on error sees
            seen.append(exc)
            raise
    xjobs.run_context(hook, registry=registry)

    def body(ctx, i):
        ctx.step.sleep("nap", "1h")
        ctx.step.wait_for_event("w", "order.paid", key="o-1")

    async def async_body(ctx, i):
        await ctx.step.sleep("nap", "1h")
        await ctx.step.wait_for_event("w", "order.paid", key="o-1")
    napper = xjobs.job(queue="q", idempotency_key=lambda i: "one", tenant="none", registry=registry,
                       name="napper")(body if kind == "sync" else async_body)
    [job] = enqueue_many(napper, [{}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job.id).state == "suspended", advance_ms=100)
    clock.advance(3_600_000)
    driver.job_wake(10)
    pacer.until(lambda: pacer.totals()["suspended"] == 2, advance_ms=100)
    spans = [s for s in EXPORTER.get_finished_spans() if s.name == "job napper"]
    assert len(spans) == 2
    for span, step in zip(sorted(spans, key=lambda s: s.start_time), ["nap", "w"]):  # type: ignore[arg-type, return-value]
        assert span.status.status_code == trace.StatusCode.OK
        assert [e.name for e in span.events] == ["suspended"]
        assert span.events[0].attributes["xjobs.step"] == step  # type: ignore[index]
    assert seen == [], "the app's run hook saw a park as an exception"


def test_an_awaited_enqueue_stores_the_span_of_the_coroutine_that_awaited_it(driver, registry_and_jobs):
    """On a worker thread (no ``conn``) as on the loop: the thread runs in a copy of the
    awaiting task's context, so the job's origin is the handler's span."""
    import asyncio

    from xjobs.enqueue import aenqueue_many
    registry, parent, child = registry_and_jobs

    async def handler() -> trace.SpanContext:
        with trace.get_tracer("app").start_as_current_span("handler") as span:
            await aenqueue_many(child, [{"n": 1}], driver=driver)
            await aenqueue_many(child, [{"n": n} for n in range(2, 200)], driver=driver)
            return span.get_span_context()
    origin = asyncio.run(handler())
    wanted = f"00-{origin.trace_id:032x}-{origin.span_id:016x}-{int(origin.trace_flags):02x}"
    stored = driver.job_list(ListFilter(limit=500))
    assert len(stored) == 199
    assert {driver.job_get(v.id).traceparent for v in stored[:3] + stored[-3:]} == {wanted}
