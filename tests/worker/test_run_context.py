"""The run's context: ``xjobs.current()`` in every body, the tenant a body writes as (row-level
security), the explicit cross-tenant escape, the app's run hook, and the run's budget."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time

import orjson
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import xjobs
from xjobs import manifest, testing
from xjobs.drivers.base import ListFilter
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.errors import CrossTenantDenied, InvalidOption

from .pacing import Pacer, make_worker


@pytest.fixture
def registry():
    return xjobs.Registry()


def declare(registry, fn, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    options.setdefault("tenant", lambda i: i.get("org", "acme"))
    return xjobs.job(registry=registry, **options)(fn)


@pytest.mark.parametrize("kind", ["def", "async"])
def test_current_answers_each_body_its_own_run_at_concurrency_50(memory_driver, registry, kind):
    seen: list[tuple[int, int | None, str | None]] = []
    lock = threading.Lock()

    def note(ctx) -> None:
        run = xjobs.current()
        with lock:
            seen.append((ctx.job_id, run.job_id if run else None, run.tenant if run else None))
    if kind == "def":
        def body(ctx, i):
            time.sleep(0.002)         # other bodies run meanwhile on the pool's threads
            note(ctx)
    else:
        async def body(ctx, i):  # type: ignore[misc]
            await asyncio.sleep(0.002)  # other bodies run meanwhile on the loop
            note(ctx)
    handle = declare(registry, body, name=f"who_{kind}")
    enqueue_many(handle, [{"n": n, "org": f"t{n % 7}"} for n in range(300)], driver=memory_driver)
    pacer = Pacer(make_worker(memory_driver, registry, concurrency=50))
    pacer.until(lambda: pacer.totals()["completed"] == 300, timeout_s=30, advance_ms=50)
    assert len(seen) == 300 and all(own == current for own, current, _ in seen)
    tenants = {own: tenant for own, _, tenant in seen}
    views = {v.id: v.tenant for v in memory_driver.job_list(ListFilter(limit=500))}
    assert tenants == views
    assert xjobs.current() is None                     # nothing leaks out of a body


def test_a_job_without_a_tenant_runs_with_none(memory_driver, registry):
    seen = []
    handle = declare(registry, lambda ctx, i: seen.append((ctx.tenant, xjobs.current().tenant)),  # type: ignore[union-attr]
                     name="untenanted", tenant="none")
    enqueue_many(handle, [{"n": 1}], driver=memory_driver)
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=50)
    assert seen == [(None, None)]


def test_the_apps_run_hook_wraps_every_run(memory_driver, registry):
    events: list[tuple[object, ...]] = []

    @contextlib.contextmanager
    def session(ctx):
        events.append(("enter", ctx.job_id, xjobs.current() is ctx))
        try:
            yield
        finally:
            events.append(("exit", ctx.job_id))
    xjobs.run_context(session, registry=registry)

    def body(ctx, i):
        events.append(("body", ctx.job_id))
        if i["n"] == 2:
            raise RuntimeError("boom")
    handle = declare(registry, body, name="hooked", retry=xjobs.Retry(attempts=1))
    ids = [e.id for e in enqueue_many(handle, [{"n": 1}, {"n": 2}], driver=memory_driver)]
    pacer = Pacer(make_worker(memory_driver, registry, concurrency=1))
    pacer.until(lambda: pacer.totals()["completed"] + pacer.totals()["dead"] == 2, advance_ms=50)
    for job_id in ids:     # entered before the body with the run current, left after it however it ended
        assert [e for e in events if e[1] == job_id] == [("enter", job_id, True), ("body", job_id),
                                                         ("exit", job_id)]


def test_a_workers_own_context_replaces_the_apps_run_hook(memory_driver, registry):
    from xjobs.config import Settings
    from xjobs.workers.queue_worker import QueueWorker
    seen: list[tuple[object, ...]] = []

    @contextlib.contextmanager
    def apps(ctx):
        seen.append(("app", ctx.job_id))
        yield

    @contextlib.contextmanager
    def workers(ctx):
        seen.append(("worker", ctx.job_id, xjobs.current() is ctx))
        yield
    xjobs.run_context(apps, registry=registry)
    handle = declare(registry, lambda ctx, i: seen.append(("body", ctx.job_id)), name="hooked")
    [job] = enqueue_many(handle, [{"n": 1}], driver=memory_driver)
    worker = QueueWorker(driver=memory_driver, registry=registry, queue="q", concurrency=1,
                         settings=Settings(poll_ms=50.0), identity="w-context", context=workers)
    pacer = Pacer(worker)
    pacer.until(lambda: pacer.totals()["completed"] == 1, advance_ms=50)
    assert seen == [("worker", job.id, True), ("body", job.id)]


def test_remaining_counts_down_to_the_timeout_or_the_drain(memory_driver, registry):
    started, release, seen = threading.Event(), threading.Event(), {}

    def body(ctx, i):
        seen["first"] = ctx.remaining()
        started.set()
        release.wait(10)
        seen["drained"] = ctx.remaining()
    enqueue_many(declare(registry, body, name="budgeted", timeout="60s"), [{"n": 1}], driver=memory_driver)
    enqueue_many(declare(registry, lambda ctx, i: seen.setdefault("unbounded", ctx.remaining()),
                         name="unbounded"), [{"n": 1}], driver=memory_driver)
    worker = make_worker(memory_driver, registry, concurrency=2)
    pacer = Pacer(worker)
    pacer.until(lambda: started.is_set() and "unbounded" in seen, advance_ms=50)
    assert 59 < seen["first"] <= 60 and seen["unbounded"] == math.inf
    worker.stop_accepting("test drain", interrupt=False, deadline_ms=pacer.now + 5_000)
    release.set()
    pacer.until(lambda: "drained" in seen)
    assert 4 < seen["drained"] <= 5


@pytest.fixture
def rls_dsn(pg_dsn):
    """A login role that row-level security applies to (a superuser bypasses every policy)."""
    role = "xjobs_rls_tester"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"do $$ begin create role {role} login; exception when duplicate_object then null; end $$")
    return make_conninfo(pg_dsn, user=role)


@pytest.mark.postgres
def test_row_level_security_scopes_a_bodys_writes_to_its_tenant(pg_dsn, pg_schema, rls_dsn, registry):
    owner = PostgresDriver(pg_dsn, schema=pg_schema)
    owner.migrate()
    role = psycopg.conninfo.conninfo_to_dict(rls_dsn)["user"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create table {pg_schema}.notes (tenant text not null, body text not null)")
        conn.execute(f"alter table {pg_schema}.notes enable row level security")
        conn.execute(f"create policy own on {pg_schema}.notes using (tenant = current_setting('xjobs.tenant', true)) "
                     f"with check (tenant = current_setting('xjobs.tenant', true) "
                     f"or current_setting('xjobs.cross_tenant', true) = 'on')")
        conn.execute(f"grant usage on schema {pg_schema} to {role}")
        conn.execute(f"grant select, insert, update, delete on all tables in schema {pg_schema} to {role}")
        conn.execute(f"grant usage on all sequences in schema {pg_schema} to {role}")
    outcome: dict = {}

    def body(ctx, i):   # ctx.transaction() completes the job: one per run
        target = {"own": ctx.tenant, "none": "acme"}.get(i["mode"], "other-org")
        try:
            with contextlib.ExitStack() as stack:
                if i["mode"] == "declared":
                    stack.enter_context(ctx.cross_tenant("copying a shared template to every org"))
                conn = stack.enter_context(ctx.transaction())
                conn.execute(f"insert into {pg_schema}.notes values (%s, %s)", (target, i["mode"]))
            outcome[i["mode"]] = "written"
        except psycopg.errors.InsufficientPrivilege:
            outcome[i["mode"]] = "refused"
            raise
    handle = declare(registry, body, name="scoped", retry=xjobs.Retry(attempts=1), cross_tenant=True)
    # a job without a tenant writes as nobody: the policy matches no tenant, it fails closed
    untenanted = declare(registry, body, name="untenanted", tenant="none", retry=xjobs.Retry(attempts=1))
    runner = PostgresDriver(rls_dsn, schema=pg_schema)
    try:
        enqueue_many(handle, [{"n": n, "org": "acme", "mode": mode}
                              for n, mode in enumerate(["own", "other", "declared"])], driver=owner)
        enqueue_many(untenanted, [{"n": 9, "mode": "none"}], driver=owner)
        pacer = Pacer(make_worker(runner, registry))
        pacer.until(lambda: len(outcome) == 4, advance_ms=50)
    finally:
        runner.close()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(f"select tenant, body from {pg_schema}.notes order by body").fetchall()
    owner.close()
    assert outcome == {"own": "written", "other": "refused", "declared": "written", "none": "refused"}
    assert rows == [("other-org", "declared"), ("acme", "own")]


def test_every_failed_attempt_reaches_the_apps_error_hook_with_its_verdict(memory_driver, registry):
    reports, done = [], threading.Event()

    def hook(ctx, error, verdict):
        reports.append((ctx.job_id, ctx.attempt, type(error).__name__, verdict.dead))
        if verdict.dead:
            done.set()

    def broken(ctx, error, verdict):
        raise RuntimeError("the reporter itself failed")
    xjobs.on_error(broken, registry=registry)          # logged and dropped; the next one still runs
    xjobs.on_error(hook, registry=registry)

    def body(ctx, i):
        raise ValueError("nope")
    handle = declare(registry, body, name="failing", retry=xjobs.Retry(attempts=2, delay=0))
    [job] = enqueue_many(handle, [{"n": 1}], driver=memory_driver)
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["dead"] == 1, advance_ms=100)
    assert done.wait(5)
    assert reports == [(job.id, 1, "ValueError", False), (job.id, 2, "ValueError", True)]
    with pytest.raises(xjobs.XJobsError):
        xjobs.on_error("not callable", registry=registry)  # type: ignore[arg-type]


def test_the_json_formatter_writes_one_object_with_the_records_fields():
    import io
    import logging

    from xjobs.logs import JsonFormatter, configure_logging
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("xjobs.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("job %s#%s dead", "send", 7, extra={"event": "job.dead", "job_id": 7, "tags": {"a": 1}})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("it broke")
    finally:
        logger.removeHandler(handler)
    first, second = (orjson.loads(line) for line in stream.getvalue().splitlines())
    assert (first["message"], first["event"], first["job_id"], first["level"]) == ("job send#7 dead", "job.dead", 7, "warning")
    assert first["tags"] == {"a": 1} and first["logger"] == "xjobs.test.json" and "args" not in first
    assert "ValueError: boom" in second["exc"]
    for bad in ({"fmt": "xml"}, {"level": "LOUD"}):
        with pytest.raises(xjobs.XJobsError):
            configure_logging(**bad)


@pytest.mark.postgres
def test_the_ambient_path_enqueues_where_configure_says(pg_dsn, pg_schema, registry):
    """handle.enqueue() with no driver: the one xjobs.configure(dsn=, schema=) names."""
    from xjobs import config
    handle = declare(registry, lambda ctx, i: None, name="ambient")
    before = (config._settings, config._driver)
    PostgresDriver(pg_dsn, schema=pg_schema).migrate()
    try:
        xjobs.configure(dsn=pg_dsn, schema=pg_schema)
        done = handle.enqueue({"n": 1, "org": "acme"})
        assert xjobs.current_driver().job_get(done.id).tenant == "acme"
    finally:   # the process's configuration as it was, and the driver this test made closed
        made = config._driver
        config._settings, config._driver = before
        if made is not None and made is not before[1]:
            made.close()
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"select name from {pg_schema}.jobs").fetchall() == [("ambient",)]


def test_only_a_job_declaring_the_capability_may_cross_tenants(registry, caplog):
    def body(ctx, i):
        with ctx.cross_tenant("a report over every org"):
            return "crossed"
    plain = declare(registry, body, name="plain")
    declared = declare(registry, body, name="declared", cross_tenant=True)
    with pytest.raises(CrossTenantDenied) as caught:
        testing.run_inline(plain, {"n": 1})
    assert caught.value.code == "X_TENANCY_CROSS_DENIED" and "a report over every org" in str(caught.value)
    assert not [r for r in caplog.records if getattr(r, "event", None) == "job.cross_tenant"]
    assert testing.run_inline(declared, {"n": 1}) == "crossed"
    assert manifest.describe(registry)["jobs"][0]["cross_tenant"] is True
    assert manifest.describe(registry)["jobs"][1]["cross_tenant"] is False
    with pytest.raises(InvalidOption):
        declare(registry, body, name="odd", cross_tenant=1)
