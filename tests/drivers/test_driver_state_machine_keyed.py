"""The driver state machine with keyed jobs: every rule of
``test_driver_state_machine.DriverPair`` (claim, ack, nack, cancel, requeue, rescue, release,
prune, ...) interleaved with enqueues of members of a few keys (concurrency 1 or 2, a dead
member keeping its place or not), on both drivers, comparing every row after each step (a
waiting member is suspended until the latest time on both) and what ``job_get`` says of each
member's key; and on Postgres, that no key ever has more holders than its concurrency."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from tests.drivers.test_driver_state_machine import EXAMPLE_TABLES, DriverPair, new_jobs
from xjobs.drivers.base import ListFilter, NewJob
from xjobs.payload import encode_payload

pytestmark = pytest.mark.postgres

# a key's concurrency and whether a dead member keeps its place, fixed per key (a key's
# members are enqueued under one declaration)
KEYS = {"k1": (1, True), "k2": (1, False), "k3": (2, False)}


class KeyedPair(DriverPair):
    def __init__(self, pg, clock, schema: str, conn: psycopg.Connection) -> None:
        super().__init__(pg, clock)
        self.schema, self.conn = schema, conn

    @rule(specs=st.lists(new_jobs, min_size=1, max_size=3), key=st.sampled_from(sorted(KEYS)))
    def enqueue_keyed_first(self, specs, key):
        self.enqueue_keyed(specs, key)

    def enqueue_keyed(self, specs, key):
        now = self.clock.now_ms()
        cap, hold = KEYS[key]
        jobs = [NewJob(name=s.name, queue=s.queue, payload=encode_payload({"key": s.key, "n": s.n}),
                       idempotency_key=f"{key}-{s.key}", tenant=s.tenant, priority=s.priority,
                       max_attempts=s.attempts, run_at_ms=None if s.delay is None else now + s.delay,
                       concurrency_key=key, key_cap=cap, key_hold=hold)
                for s in specs]
        self.enqueued += len(jobs)
        self.both(lambda d: d.job_enqueue(jobs))

    # the same rule under another name, so an example of 30 steps enqueues members of its keys
    # more often among the thirty other rules (Hypothesis picks rules alike)
    @rule(specs=st.lists(new_jobs, min_size=1, max_size=3), key=st.sampled_from(sorted(KEYS)))
    def enqueue_keyed_again(self, specs, key):
        self.enqueue_keyed(specs, key)

    @invariant()
    def same_keys(self):
        for view in self.memory.job_list(ListFilter(limit=1000)):
            mem, pg = self.memory.job_get(view.id).key, self.pg.job_get(view.id).key
            assert (mem and dataclasses.astuple(mem)) == (pg and dataclasses.astuple(pg))

    @invariant()
    def no_key_over_its_concurrency(self):
        rows = self.conn.execute(
            f"select name, concurrency_key, count(*) filter (where state = 'running'), "
            f"count(*) filter (where key_run_at is null and (state in ('ready', 'running', 'suspended') "
            f"or (state = 'dead' and key_hold))), max(key_cap) "
            f"from {self.schema}.jobs where concurrency_key is not null group by 1, 2").fetchall()
        for name, key, running, holders, cap in rows:
            assert running <= holders <= cap, (name, key, running, holders, cap)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree_on_keyed_jobs(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        identities = conn.execute("select table_name, column_name from information_schema.columns "
                                  "where table_schema = %s and is_identity = 'YES' and table_name = any(%s)",
                                  (schema, list(EXAMPLE_TABLES))).fetchall()
        restart = "select setval(pg_get_serial_sequence('{}.{}', '{}'), 1, false)"
        empty = "; ".join([f"delete from {schema}.{table}" for table in EXAMPLE_TABLES]
                          + [restart.format(schema, table, column) for table, column in identities])

        def fresh_pair() -> KeyedPair:
            conn.execute(empty)
            return KeyedPair(pg_driver, clock, schema, conn)

        run_state_machine_as_test(fresh_pair, settings=settings(  # type: ignore[arg-type]
            max_examples=40, stateful_step_count=30, deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
