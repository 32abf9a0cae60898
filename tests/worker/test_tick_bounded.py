"""A deployment that runs only ``xjobsd tick`` keeps its tables bounded: every tick publishes
what was staged and, as the leader, prunes what outlived its retention. Both drivers, in this
process, the database's clock stepped past the retention between ticks."""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Callable

import psycopg
import pytest

import xjobs
from xjobs.config import Settings
from xjobs.context import Ctx
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.errors import InvalidOption
from xjobs.outbox import stage_many
from xjobs.tick import run_tick
from xjobs.workers.scheduler import ELECTION

HOUR_MS = 3_600_000.0
# a thousand ticks on the memory driver; PostgreSQL's round trips make each of its ticks a
# tenth of a second, so it takes the same steps over fewer (the run counts settle by tick 49):
# `python bench/tick_bounded.py --ticks 1000` is the thousand on PostgreSQL
TICKS = {"memory": 1_000, "postgres": 150}
PER_TICK = 4            # jobs enqueued, rows staged and events sent before every tick
# short retention, so one step of the database's clock puts the last tick's rows past it
HALF_HOUR_MS = 1_800_000.0
SETTINGS = Settings(retention_completed_ms=HALF_HOUR_MS, retention_finished_ms=HALF_HOUR_MS,
                    outbox_retention_ms=HALF_HOUR_MS, event_retention_ms=HALF_HOUR_MS)


def fast_clock(step_ms: float = 100.0) -> Callable[[], float]:
    """The tick's loop clock: every reading a step later, so the pass's quiet checks and polls
    come due without this test waiting on them (the deadline stays far away)."""
    counter = itertools.count()
    return lambda: next(counter) * step_ms


@pytest.fixture
def brisk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass's quiet checks and claim poll at the shortest the settings allow: a tick with
    nothing left ends in tens of milliseconds, not the few hundred a deployment can spare."""
    import xjobs.tick
    monkeypatch.setattr(xjobs.tick, "_IDLE_CHECK_MS", 10.0)
    monkeypatch.setattr(xjobs.tick, "_TICK_POLL_MS", 10.0)


def rows(driver: object, dsn: str, conn: psycopg.Connection | None = None) -> dict[str, int]:
    """How many rows each growing table holds now (on ``conn`` when given)."""
    if isinstance(driver, MemoryDriver):
        table = driver.table
        return {"jobs": len(table.rows), "job_history": sum(map(len, table.history.values())),
                "job_steps": sum(map(len, table.steps.values())), "outbox": len(table.outbox),
                "events": len(table.events), "job_rates": len(table.rates)}
    with (psycopg.connect(dsn, autocommit=True) if conn is None else contextlib.nullcontext(conn)) as db:
        schema = getattr(driver, "schema")
        return {name: int(db.execute(f"select count(*) from {schema}.{name}").fetchone()[0])  # type: ignore[index]
                for name in ("jobs", "job_history", "job_steps", "outbox", "events", "job_rates")}


def registry_for_ticks() -> tuple[xjobs.Registry, xjobs.JobHandle]:
    registry = xjobs.Registry()

    def work(ctx: Ctx, input: dict) -> int:
        return int(ctx.step.run("double", lambda: input["n"] * 2))
    handle = xjobs.job(queue="q", idempotency_key=lambda i: f"w:{i['n']}", tenant="none", registry=registry,
                       name="work")(work)
    return registry, handle


@pytest.mark.slow
def test_a_tick_only_deployment_keeps_every_table_bounded_over_a_thousand_ticks(driver, clock, pg_dsn, brisk):
    registry, handle = registry_for_ticks()
    sizes: list[dict[str, int]] = []
    published = pruned = 0
    n = itertools.count()
    ticks = TICKS["memory" if isinstance(driver, MemoryDriver) else "postgres"]
    conn = psycopg.connect(pg_dsn, autocommit=True) if not isinstance(driver, MemoryDriver) else None
    for _ in range(ticks):
        enqueue_many(handle, [{"n": next(n)} for _ in range(PER_TICK)], driver=driver)
        stage_many(None, handle, [{"n": next(n)} for _ in range(PER_TICK)], driver=driver)
        for _ in range(PER_TICK):
            xjobs.send_event("tick.test", key=str(next(n)), payload={}, driver=driver)
        summary = run_tick(driver=driver, registry=registry, settings=SETTINGS, deadline_s=3600,
                           clock=fast_clock(), identity="tick-test")
        assert not summary.failed and not summary.reached_deadline, summary.as_json()
        assert summary.cron["leader"] is True
        published += summary.outbox["published"]
        pruned += summary.upkeep["pruned"]["jobs"]
        sizes.append(rows(driver, pg_dsn, conn))
        clock.advance(HOUR_MS)      # past the retention of everything the tick finished
    if conn is not None:
        conn.close()
    assert published == ticks * PER_TICK                      # every staged row became a job ...
    assert pruned == (ticks - 1) * 2 * PER_TICK                # ... and every job went after its hour
    # after the first ticks no table grows: what one tick writes the next one prunes (the run
    # counts are kept two days, 48 of these hours, then go as fast as they come)
    settled = sizes[100:]
    for table in ("jobs", "job_history", "job_steps", "outbox", "events"):
        assert max(s[table] for s in settled) <= 2 * 2 * PER_TICK * 2, (table, max(s[table] for s in settled))
    assert max(s["job_rates"] for s in settled) == max(s["job_rates"] for s in sizes[60:100])
    assert sizes[-1]["jobs"] == 2 * PER_TICK      # the last tick's jobs, inside their retention


def test_a_tick_beside_a_leader_neither_fires_cron_nor_prunes_and_still_publishes(driver, clock, pg_dsn, brisk):
    registry, handle = registry_for_ticks()
    enqueue_many(handle, [{"n": 1}], driver=driver)
    run_tick(driver=driver, registry=registry, settings=SETTINGS, clock=fast_clock(), identity="first")
    clock.advance(HOUR_MS)
    assert driver.leader_elect(ELECTION, "a-daemon", 60_000)      # a daemon's scheduler leads
    stage_many(None, handle, [{"n": 2}], driver=driver)
    summary = run_tick(driver=driver, registry=registry, settings=SETTINGS, clock=fast_clock(), identity="second")
    assert summary.cron["leader"] is False and summary.upkeep["pruned"] is None
    assert summary.outbox["published"] == 1 and summary.jobs == {"work": {"completed": 1}}
    assert rows(driver, pg_dsn)["jobs"] == 2                      # the old one is the leader's to prune
    assert driver.leader_elect(ELECTION, "a-daemon", 60_000)      # and its lease was never touched
    driver.leader_resign(ELECTION, "a-daemon")
    summary = run_tick(driver=driver, registry=registry, settings=SETTINGS, clock=fast_clock(), identity="third")
    assert summary.cron["leader"] is True and summary.upkeep["pruned"]["jobs"] == 1


@pytest.mark.parametrize("knob, value", [("wait_for_work_s", -1), ("wait_for_work_s", math.nan),
                                         ("wait_for_work_s", True), ("deadline_s", math.inf),
                                         ("deadline_s", 0)])
def test_a_tick_refuses_a_knob_that_can_never_be_right_before_it_touches_the_database(knob, value):
    registry, _ = registry_for_ticks()
    driver = MemoryDriver()
    with pytest.raises(InvalidOption) as refused:
        run_tick(driver=driver, registry=registry, settings=SETTINGS, **{knob: value})
    assert refused.value.code == "X_INVALID_OPTION" and driver.leader_elect(ELECTION, "nobody-else", 1000)


@pytest.mark.postgres
def test_ticks_in_one_process_keep_the_callers_pools_open_between_them(pg_dsn, pg_schema, clock, brisk):
    """A tick's roles borrow the caller's driver: none of them closes its pools, so the next
    tick runs on the sessions the last one opened (only each role's LISTEN is its own)."""
    name = f"tick-pools-{pg_schema}"[:63]
    driver = PostgresDriver(pg_dsn, schema=pg_schema, clock=clock, application_name=name)
    registry, handle = registry_for_ticks()

    def sessions() -> set[int]:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            return {int(pid) for (pid,) in conn.execute(
                "select pid from pg_stat_activity where application_name = %s", (name,))}
    try:
        driver.migrate()
        seen: list[set[int]] = []
        for n in range(3):
            enqueue_many(handle, [{"n": n}], driver=driver)
            summary = run_tick(driver=driver, registry=registry, settings=SETTINGS, clock=fast_clock(),
                               identity=f"tick-{n}")
            assert summary.jobs == {"work": {"completed": 1}}, summary.as_json()
            seen.append(sessions())
        assert seen[0] and seen[0] <= seen[1] <= seen[2], seen
    finally:
        driver.close()
