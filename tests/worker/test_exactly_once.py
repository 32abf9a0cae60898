"""Against real PostgreSQL: bulk enqueue, the in-process worker, transactions shared with the
app, and pickup by notification. Effects are checked in SQL, not in Python memory."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

import xjobs
from tests.waiting import wait_for
from xjobs.config import Settings
from xjobs.drivers.base import Claim, ListFilter, WorkerExit
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.errors import Aborted, DatabaseTimeout
from xjobs.workers.host import InProcessHost
from xjobs.workers.queue_worker import QueueWorker

from .pacing import Pacer, make_worker

pytestmark = pytest.mark.postgres


@pytest.fixture
def live_driver(pg_dsn, pg_schema):
    """A driver on the real clock, as production runs it."""
    driver = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=4)
    driver.migrate()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"create table {pg_schema}.effects (job_id bigint primary key, n int not null, "
                     "runs int not null default 1)")
    yield driver
    driver.close()


@pytest.mark.slow
def test_ten_thousand_jobs_run_exactly_once(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()
    effect = (f"insert into {pg_schema}.effects (job_id, n) values (%s, %s) "
              "on conflict (job_id) do update set runs = effects.runs + 1")
    pool = PostgresDriver(pg_dsn, schema=pg_schema, pool_size=8)

    @xjobs.job(queue="bulk", idempotency_key=lambda i: f"n:{i['n']}", tenant="none", registry=registry)
    def record(ctx, input):
        with pool.database.connection() as conn:
            conn.execute(effect, (ctx.job_id, input["n"]))

    results = enqueue_many(record, [{"n": n} for n in range(10_000)], driver=live_driver)
    assert len({r.id for r in results}) == 10_000 and not any(r.deduped for r in results)
    worker = QueueWorker(driver=PostgresDriver(pg_dsn, schema=pg_schema), registry=registry,
                         queue="bulk", concurrency=32, settings=Settings(poll_ms=100))
    InProcessHost(worker).run(until=lambda: worker.stats_.completed >= 10_000)
    pool.close()
    with psycopg.connect(pg_dsn) as conn:
        count, distinct_n, max_runs = conn.execute(  # type: ignore[misc]
            f"select count(*), count(distinct n), max(runs) from {pg_schema}.effects").fetchone()
        states: dict[str, int] = dict(conn.execute(f"select state, count(*) from {pg_schema}.jobs group by state").fetchall())
        orphans = conn.execute(f"select count(*) from {pg_schema}.jobs j left join {pg_schema}.effects e "  # type: ignore[index]
                               "on e.job_id = j.id where e.job_id is null").fetchone()[0]
    assert (count, distinct_n, max_runs) == (10_000, 10_000, 1)
    assert states == {"completed": 10_000}
    assert orphans == 0


def test_transaction_commits_the_body_and_the_completion_together(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()

    @xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry)
    def charge(ctx, input):
        with ctx.transaction() as conn:
            conn.execute(f"insert into {pg_schema}.effects (job_id, n) values (%s, %s)", (ctx.job_id, input["n"]))

    [done] = enqueue_many(charge, [{"n": 1}], driver=live_driver)
    pacer = Pacer(make_worker(live_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 1)
    assert live_driver.job_get(done.id).state == "completed"
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"select n from {pg_schema}.effects").fetchall() == [(1,)]


def test_transaction_rolls_back_when_the_lease_is_gone(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()
    inside, outcome = threading.Event(), {}

    @xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry)
    def charge(ctx, input):
        try:
            with ctx.transaction() as conn:
                conn.execute(f"insert into {pg_schema}.effects (job_id, n) values (%s, %s)", (ctx.job_id, 1))
                live_driver.job_cancel(ctx.job_id, "cancelled mid-transaction")   # another session
                inside.set()
        except Aborted as exc:   # refused like every write of a run that lost its job
            outcome["error"] = (exc.code, exc.details["cause"])
            raise

    [job] = enqueue_many(charge, [{"n": 1}], driver=live_driver)
    pacer = Pacer(make_worker(live_driver, registry))
    pacer.until(lambda: "error" in outcome)
    # refused at its commit's fence, or before it once the worker heard the cancel
    assert outcome["error"] in {("X_ABORTED", "X_JOB_LEASE_LOST"), ("X_ABORTED", "X_JOB_CANCELLED")}
    assert live_driver.job_get(job.id).state == "cancelled"
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(f"select count(*) from {pg_schema}.effects").fetchone()[0] == 0  # type: ignore[index]


def test_enqueue_in_the_callers_transaction(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()
    handle = xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
                       registry=registry, name="tx")(lambda ctx, i: None)
    with psycopg.connect(pg_dsn) as conn:
        enqueue_many(handle, [{"n": 1}], driver=live_driver, conn=conn)
        conn.rollback()
        enqueue_many(handle, [{"n": 2}], driver=live_driver, conn=conn)
        conn.commit()
    assert [v.idempotency_key for v in live_driver.job_list(ListFilter())] == ["2"]


def test_enqueue_wakes_an_idle_worker_without_waiting_for_the_poll(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()
    ran = threading.Event()
    handle = xjobs.job(queue="idle", idempotency_key=lambda i: "one", tenant="none",
                       registry=registry, name="ping")(lambda ctx, i: ran.set())
    worker = QueueWorker(driver=PostgresDriver(pg_dsn, schema=pg_schema), registry=registry,
                         queue="idle", concurrency=1, settings=Settings(poll_ms=600_000))
    host = InProcessHost(worker).start()
    try:
        # the first pass polls once at start: enqueue only after it, while the worker idles
        wait_for(lambda: worker.passes >= 1, 10, "the worker's first pass")
        enqueue_many(handle, [{}], driver=live_driver)
        assert ran.wait(10), "the notification did not wake the worker (poll is 10 minutes)"
    finally:
        host.stop(5)


def test_a_job_completed_by_its_transaction_is_not_a_lost_lease(pg_dsn, pg_schema, live_driver):
    registry = xjobs.Registry()
    committed, release = threading.Event(), threading.Event()

    @xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry)
    def charge(ctx, input):
        with ctx.transaction() as conn:
            conn.execute(f"insert into {pg_schema}.effects (job_id, n) values (%s, %s)", (ctx.job_id, 1))
        committed.set()
        release.wait(10)            # still running when the next heartbeat comes round

    [job] = enqueue_many(charge, [{"n": 1}], driver=live_driver)
    worker = make_worker(live_driver, registry, heartbeat_ms=100, lease_ms=1000)
    pacer = Pacer(worker)
    pacer.until(committed.is_set)
    pacer.pass_(advance_ms=2000)    # a heartbeat and a whole window pass after the commit
    assert pacer.totals()["lease_lost"] == 0 and not worker.runs.held[job.id].signal.is_set()
    release.set()
    pacer.until(lambda: worker.in_flight() == 0)
    assert (pacer.totals()["completed"], pacer.totals()["lease_lost"]) == (1, 0)
    assert live_driver.job_get(job.id).state == "completed"


def test_statement_timeout_caps_the_drivers_verbs_but_not_body_transactions(pg_dsn, pg_schema, live_driver):
    capped = PostgresDriver(pg_dsn, schema=pg_schema, statement_timeout_ms=200)
    try:
        with psycopg.connect(pg_dsn) as locker:
            locker.execute(f"lock table {pg_schema}.jobs in access exclusive mode")
            with pytest.raises(DatabaseTimeout) as err:
                capped.job_claim(Claim(["q"], 1, 30_000, "w"))     # gives up instead of hanging
            assert isinstance(err.value.__cause__, psycopg.errors.QueryCanceled)
            locker.rollback()
        registry = xjobs.Registry()
        handle = xjobs.job(queue="q", idempotency_key=lambda i: "k", tenant="none",
                           registry=registry, name="slow")(lambda ctx, i: None)
        enqueue_many(handle, [{}], driver=live_driver)
        [job] = capped.job_claim(Claim(["q"], 1, 30_000, "w"))
        from xjobs.drivers.base import Lease
        with capped.job_transaction(Lease(job.id, job.token)) as conn:
            conn.execute("select pg_sleep(0.4)")              # the app's statement, not capped
        assert capped.job_get(job.id).state == "completed"
    finally:
        capped.close()


def test_jobs_coming_back_to_ready_wake_listening_workers(pg_dsn, pg_schema, live_driver):
    from xjobs.drivers.base import Nack, NewJob
    listener = live_driver.job_listen()
    try:
        live_driver.job_enqueue([NewJob(name="n", queue="back", payload=b"{}", idempotency_key="k")])
        assert _notified(listener) == {"back"}                 # the insert trigger
        [job] = live_driver.job_claim(Claim(["back"], 1, 30_000, "w1"))
        assert len(live_driver.job_release_worker(WorkerExit("w1", crashed=False))) == 1   # handed back
        assert _notified(listener) == {"back"}
        [job] = live_driver.job_claim(Claim(["back"], 1, 30_000, "w2"))
        live_driver.job_cancel(job.id, "stop")
        live_driver.job_requeue(job.id)                       # an operator's retry
        assert _notified(listener) == {"back"}
        [job] = live_driver.job_claim(Claim(["back"], 1, 30_000, "w3"))
        interrupted = Nack(job.id, job.token, "interrupted", error="drained")
        assert live_driver.job_nack(interrupted) is True       # a drain's hand-back
        assert _notified(listener) == {"back"}
        [job] = live_driver.job_claim(Claim(["back"], 1, 30_000, "w4"))
        shed = Nack(job.id, job.token, "shed")
        assert live_driver.job_nack(shed) is True              # a shed wakes nobody
        assert _notified(listener, timeout_s=0.3) == set()
    finally:
        listener.close()


def _notified(listener, timeout_s: float = 5.0) -> set[str]:
    """The queues notified, waiting on the listener's socket (never a sleep)."""
    import select
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        select.select([listener.fileno()], [], [], max(0.0, deadline - time.monotonic()))
        queues = listener.poll()
        if queues:
            return queues
    return set()
