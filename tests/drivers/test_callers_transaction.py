"""Whatever takes the caller's connection writes ALL of its rows in the caller's transaction:
a rollback leaves nothing, and nobody sees anything before the commit.

Each verb is tried on a FRESH psycopg connection (not autocommit, no statement run yet), the
case where psycopg's ``conn.transaction()`` would begin and commit a transaction of its own
instead of a savepoint, so the caller's rollback would have nothing to undo.
"""

from __future__ import annotations

import orjson
import psycopg
import pytest

import xjobs
from tests.drivers.parity import run
from xjobs import outbox
from xjobs.drivers.base import ListFilter, NewEvent, StepWait
from xjobs.drivers.records import ENQUEUE_CHUNK
from xjobs.enqueue import enqueue_many
from xjobs.errors import DriverError
from xjobs.events import send_event

pytestmark = pytest.mark.postgres


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as other:
        return other.execute(sql).fetchone()[0]  # type: ignore[index]


def _fresh(dsn: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn)
    assert not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return conn


@pytest.fixture
def handle() -> xjobs.JobHandle:
    registry = xjobs.Registry()
    return xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none",
                     registry=registry, name="tx")(lambda ctx, i: None)


def test_a_rolled_back_event_is_never_delivered_to_a_job_that_waits_after_it(pg_dsn, pg_driver):
    # the job exists before the send (a wait answers events sent since its job was created)
    # and starts waiting only after the sender rolled back
    _, lease = run(pg_driver, "waiter")
    events = f"select count(*) from {pg_driver.schema}.events"
    with _fresh(pg_dsn) as conn:
        send_event("order.paid", key="o-1", payload={"amount": 1}, conn=conn, driver=pg_driver)
        assert _count(pg_dsn, events) == 0, "visible before the caller committed"
        conn.rollback()
    assert _count(pg_dsn, events) == 0
    outcome = pg_driver.step_wait(lease, StepWait("w", "order.paid", "o-1", 0, None, 1))
    assert outcome.done and outcome.timed_out and outcome.value is None


def test_an_event_sent_on_a_fresh_connection_is_delivered_once_committed(pg_dsn, pg_driver):
    _, lease = run(pg_driver, "waiter")
    with _fresh(pg_dsn) as conn:
        send_event("order.paid", key="o-1", payload={"amount": 2}, conn=conn, driver=pg_driver)
        conn.commit()
    assert pg_driver.step_wait(lease, StepWait("w", "order.paid", "o-1", 0, None, 1)).value == {"amount": 2}


def test_a_rolled_back_send_leaves_a_parked_waiter_parked(pg_dsn, pg_driver):
    job_id, lease = run(pg_driver, "waiter")
    assert not pg_driver.step_wait(lease, StepWait("w", "order.paid", "o-1", None, None, 1)).done
    with _fresh(pg_dsn) as conn:
        assert send_event("order.paid", key="o-1", conn=conn, driver=pg_driver).woken == 1
        assert pg_driver.job_get(job_id).state == "suspended"
        conn.rollback()
    assert pg_driver.job_get(job_id).state == "suspended"
    assert [s.state for s in pg_driver.step_list(job_id).steps] == ["waiting"]


@pytest.mark.parametrize("count", [1, ENQUEUE_CHUNK + 1], ids=["one-statement", "chunked"])
def test_a_rolled_back_enqueue_leaves_nothing(pg_dsn, pg_driver, handle, count):
    jobs = f"select count(*) from {pg_driver.schema}.jobs"
    with _fresh(pg_dsn) as conn:
        enqueue_many(handle, [{"n": n} for n in range(count)], conn=conn, driver=pg_driver)
        assert _count(pg_dsn, jobs) == 0, "visible before the caller committed"
        conn.rollback()
    assert _count(pg_dsn, jobs) == 0
    with _fresh(pg_dsn) as conn:
        enqueue_many(handle, [{"n": n} for n in range(count)], conn=conn, driver=pg_driver)
        conn.commit()
    assert len(pg_driver.job_list(ListFilter(limit=count + 1))) == count


def test_a_rolled_back_stage_leaves_nothing(pg_dsn, pg_driver, handle):
    staged = f"select count(*) from {pg_driver.schema}.outbox"
    with _fresh(pg_dsn) as conn:
        outbox.stage(conn, handle, {"n": 1}, driver=pg_driver)
        outbox.stage_many(conn, handle, [{"n": 2}, {"n": 3}], driver=pg_driver)
        assert _count(pg_dsn, staged) == 0, "visible before the caller committed"
        conn.rollback()
    assert _count(pg_dsn, staged) == 0
    with _fresh(pg_dsn) as conn:
        outbox.stage(conn, handle, {"n": 4}, driver=pg_driver)
        conn.commit()
    assert _count(pg_dsn, staged) == 1


def test_a_failed_send_inside_a_begun_transaction_leaves_the_callers_work_usable(pg_dsn, pg_driver):
    """Inside a transaction the caller already began, a verb's statements are a savepoint: a
    refusal from the server rolls back the verb's rows only."""
    with _fresh(pg_dsn) as conn:
        conn.execute("create temporary table mine (n int)")
        conn.execute("insert into mine values (1)")
        bad = orjson.dumps({"v": 1})
        with pytest.raises(DriverError) as err:
            pg_driver.event_send(NewEvent("e", "k", bad[:-1]), conn=conn)  # malformed JSON
        assert isinstance(err.value.__cause__, psycopg.Error)
        assert conn.execute("select count(*) from mine").fetchone()[0] == 1  # type: ignore[index]
        conn.rollback()
