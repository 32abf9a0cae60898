"""``enqueue_many`` of more than one chunk: built chunk by chunk while the chunks before are
inserted, and still all or nothing, on both drivers and on a caller's connection."""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg
import pytest

import xjobs
from xjobs.drivers.base import NewJob
from xjobs.drivers.pg_jobs import copy_row
from xjobs.drivers.records import ENQUEUE_CHUNK
from xjobs.drivers.sql import raw_statements, statements
from xjobs.enqueue import MAX_BATCH, enqueue_many
from xjobs.errors import InvalidOption, PayloadInvalid, PayloadTooLarge


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


def declare(registry, **options):
    options.setdefault("queue", "q")
    options.setdefault("tenant", "none")
    return xjobs.job(registry=registry, **options)(lambda ctx, i: None)


def test_a_large_call_is_answered_in_input_order(driver, registry):
    handle = declare(registry, name="many", idempotency_key=lambda i: str(i % 8_000))
    answers = enqueue_many(handle, list(range(12_000)), driver=driver)
    assert len(answers) == 12_000
    assert [a.deduped for a in answers] == [False] * 8_000 + [True] * 4_000
    assert [a.id for a in answers[8_000:]] == [a.id for a in answers[:4_000]]
    assert driver.job_stats() == {"q": {"ready": 8_000}}


def test_what_only_building_finds_in_a_late_chunk_writes_nothing(driver, registry):
    def key(i):
        if i == 2 * ENQUEUE_CHUNK + 3:
            raise RuntimeError("this key function fails on one input")
        return str(i)
    handle = declare(registry, name="late", idempotency_key=key)
    with pytest.raises(PayloadInvalid, match="RuntimeError: this key function fails"):
        enqueue_many(handle, list(range(3 * ENQUEUE_CHUNK)), driver=driver)
    big = declare(registry, name="big", idempotency_key=lambda i: str(i["n"]))
    inputs = [{"n": n, "pad": "x" * (2_000_000 if n == ENQUEUE_CHUNK + 1 else 0)} for n in range(ENQUEUE_CHUNK + 2)]
    with pytest.raises(PayloadTooLarge):
        enqueue_many(big, inputs, driver=driver)
    assert driver.job_stats() == {}
    assert not enqueue_many(handle, [1], driver=driver)[0].deduped   # the driver serves on


def test_the_call_as_a_whole_is_refused_before_anything_is_built(driver, registry):
    built: list[object] = []
    handle = declare(registry, name="counted", idempotency_key=lambda i: built.append(i) or str(i))  # type: ignore[func-returns-value]
    with pytest.raises(InvalidOption):
        enqueue_many(handle, list(range(MAX_BATCH + 1)), driver=driver)
    with pytest.raises(InvalidOption):
        enqueue_many(handle, list(range(ENQUEUE_CHUNK + 1)), delay="soon", driver=driver)
    assert built == []


@pytest.mark.postgres
def test_on_a_callers_connection_it_is_part_of_the_callers_transaction(pg_driver, registry):
    handle = declare(registry, name="joined", idempotency_key=lambda i: str(i))
    with psycopg.connect(pg_driver.dsn) as conn:
        with pytest.raises(ZeroDivisionError), conn.transaction():
            enqueue_many(handle, list(range(2 * ENQUEUE_CHUNK + 1)), conn=conn, driver=pg_driver)
            1 / 0
        assert pg_driver.job_stats() == {}
        with conn.transaction():
            answers = enqueue_many(handle, list(range(2 * ENQUEUE_CHUNK + 1)), conn=conn, driver=pg_driver)
            assert pg_driver.job_stats() == {}        # not committed yet: another session sees nothing
        assert len(answers) == 2 * ENQUEUE_CHUNK + 1
    assert pg_driver.job_stats() == {"q": {"ready": 2 * ENQUEUE_CHUNK + 1}}


def test_a_live_holder_in_a_late_chunk_is_answered_and_the_rest_still_goes_in(driver, registry):
    """The Postgres driver copies a chunk of fresh namespaces; a holder it did not know of
    fails that chunk's copy, which is redone by the insert statement: same answers."""
    handle = declare(registry, name="held", idempotency_key=lambda i: str(i))
    [first] = enqueue_many(handle, [2 * ENQUEUE_CHUNK - 7], driver=driver)
    answers = enqueue_many(handle, list(range(3 * ENQUEUE_CHUNK)), driver=driver)
    assert answers[2 * ENQUEUE_CHUNK - 7].id == first.id and answers[2 * ENQUEUE_CHUNK - 7].deduped
    fresh = [a for n, a in enumerate(answers) if n != 2 * ENQUEUE_CHUNK - 7]
    assert not any(a.deduped for a in fresh) and len({a.id for a in fresh} | {first.id}) == 3 * ENQUEUE_CHUNK
    assert driver.job_stats() == {"q": {"ready": 3 * ENQUEUE_CHUNK}}


def test_a_namespace_repeated_in_a_later_chunk_answers_the_first(driver, registry):
    handle = declare(registry, name="again", idempotency_key=lambda i: str(i % (ENQUEUE_CHUNK + 5)))
    answers = enqueue_many(handle, list(range(2 * ENQUEUE_CHUNK)), driver=driver)
    assert [a.id for a in answers[ENQUEUE_CHUNK + 5:]] == [a.id for a in answers[:ENQUEUE_CHUNK - 5]]
    assert sum(a.deduped for a in answers) == ENQUEUE_CHUNK - 5
    assert driver.job_stats() == {"q": {"ready": ENQUEUE_CHUNK + 5}}


@pytest.mark.postgres
def test_copied_rows_are_the_rows_the_insert_statement_writes(pg_driver, registry):
    """One job of each kind written by COPY (a call of many chunks) and by the statement (a
    call of one): every column an enqueue sets is the same but the ids and keys."""
    handle = declare(registry, name="same", idempotency_key=lambda i: str(i["n"]), tenant=lambda i: i["t"],
                     priority=3)
    inputs = [{"n": n, "t": f"t{n % 3}"} for n in range(ENQUEUE_CHUNK + 1)]
    enqueue_many(handle, inputs, delay="90s", enqueued_by="cli", driver=pg_driver)
    enqueue_many(handle, [{"n": -1, "t": "t0"}], delay="90s", enqueued_by="cli", driver=pg_driver)
    with psycopg.connect(pg_driver.dsn) as conn:
        rows = conn.execute(
            f"select distinct name, queue, state, tenant is not null, enqueued_by, priority, max_attempts, attempt,"
            f" round(extract(epoch from run_at - created_at)), traceparent is null, dedupe_window"
            f" from {pg_driver.schema}.jobs").fetchall()
    assert rows == [("same", "q", "ready", True, "cli", 3, handle.retry.attempts, 0, 90, True, None)]


@pytest.mark.postgres
def test_copy_statement_takes_the_rows_its_driver_writes(pg_driver):
    """The COPY test_sql.py cannot prepare, run on the rows its driver writes."""
    assert sorted(n for n, sql in raw_statements().items() if sql.lower().startswith("copy ")) == ["job_enqueue_copy"]
    now = datetime.now(timezone.utc)
    jobs = [NewJob(name="send", queue="default", payload=b'{"a": "tab\\there"}', idempotency_key="k\tk",
                   tenant="t", enqueued_by="cli", priority=-3, max_attempts=2, traceparent="00-x"),
            NewJob(name="send", queue="default", payload=b"[]", idempotency_key="j", delay_ms=1500.0),
            NewJob(name="send", queue="default", payload=b"1", idempotency_key="i", run_at_ms=1.8e12)]
    with pg_driver.connect() as conn, conn.transaction(force_rollback=True), conn.cursor() as cur:
        with cur.copy(statements(pg_driver.schema, True)["job_enqueue_copy"]) as copy:
            for n, job in enumerate(jobs, 1):
                copy.write_row(copy_row(job, -n, now, now.isoformat()))
        rows = cur.execute(f"select id, payload, idempotency_key, tenant, priority, extract(epoch from run_at - created_at),"
                           f" extract(epoch from run_at) from {pg_driver.schema}.jobs order by id desc").fetchall()
    assert [r[:5] for r in rows] == [(-1, {"a": "tab\there"}, "k\tk", "t", -3), (-2, [], "j", None, 0),
                                     (-3, 1, "i", None, 0)]
    assert [float(rows[0][5]), float(rows[1][5]), float(rows[2][6])] == [0.0, 1.5, 1.8e9]


# what keeps a chunk from the Postgres driver's COPY: its chunks go through the insert
# statement, each sent in a pipeline while the next chunk is built
NOT_COPIED: dict[str, dict[str, object]] = {"window": {"dedupe_window": "1h"}, "keyed": {"concurrency_key": lambda i: str(i % 7), "concurrency": 2},
              "debounced": {"debounce": "10s"}}


@pytest.mark.parametrize("kind", sorted(NOT_COPIED))
def test_chunks_the_copy_cannot_take_are_answered_in_input_order(driver, registry, kind):
    handle = declare(registry, name=kind, idempotency_key=lambda i: str(i % (ENQUEUE_CHUNK + 3)), **NOT_COPIED[kind])
    answers = enqueue_many(handle, list(range(2 * ENQUEUE_CHUNK + 1)), driver=driver)
    repeated = answers[ENQUEUE_CHUNK + 3:]
    assert [a.id for a in repeated] == [a.id for a in answers[:len(repeated)]]
    assert all(a.deduped for a in repeated) and not any(a.deduped for a in answers[:ENQUEUE_CHUNK + 3])
    assert sum(driver.job_stats()[handle.queue].values()) == ENQUEUE_CHUNK + 3


@pytest.mark.parametrize("kind", sorted(NOT_COPIED))
def test_a_refusal_built_while_a_chunk_is_inserted_writes_nothing(driver, registry, kind):
    def key(i):
        if i == 2 * ENQUEUE_CHUNK + 3:
            raise RuntimeError("this key function fails on one input")
        return str(i)
    handle = declare(registry, name=kind, idempotency_key=key, **NOT_COPIED[kind])
    with pytest.raises(PayloadInvalid, match="RuntimeError: this key function fails"):
        enqueue_many(handle, list(range(3 * ENQUEUE_CHUNK)), driver=driver)
    assert driver.job_stats() == {}
    assert not enqueue_many(handle, [1], driver=driver)[0].deduped   # the driver serves on
