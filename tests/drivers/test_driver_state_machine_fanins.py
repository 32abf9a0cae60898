"""The driver state machine with the verbs of workflows: every rule of
``test_driver_state_machine.DriverPair`` (enqueue, claim, ack, nack, cancel, requeue, rescue,
prune, ...) interleaved with fan-outs of held jobs and batches, on both drivers, comparing every
answer, every row and every fan-in's counts after each step."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from tests.drivers.test_driver_state_machine import EXAMPLE_TABLES, DriverPair, _time
from xjobs.children import store_of
from xjobs.drivers.base import NewJob
from xjobs.drivers.fanins import FanOut, NewBatch
from xjobs.payload import encode_payload

pytestmark = pytest.mark.postgres


def _members(n: int, queue: str) -> list[NewJob]:
    return [NewJob(name="n1", queue=queue, payload=encode_payload({"i": i}), idempotency_key="unused")
            for i in range(n)]


def _fanned(outcome) -> tuple:
    members = None if outcome.members is None else [(m.index, m.id, m.state, m.error, m.result)
                                                   for m in outcome.members]
    return (outcome.fanin_id, members, outcome.suspended, outcome.fenced, outcome.completed, outcome.value)


class FanInPair(DriverPair):
    def __init__(self, pg, clock) -> None:
        super().__init__(pg, clock)
        self.batches = 0

    @rule(lease=DriverPair.leases, n=st.integers(0, 3), step=st.sampled_from(["f1", "f2"]),
          queue=st.sampled_from(["q1", "q2"]))
    def fan_out(self, lease, n, step, queue):
        jobs = _members(n, queue)
        self.both_held(lease, lambda d, held: _fanned(d.fanins.fanin_open(held, FanOut(step, 1, n, [jobs]))))

    @rule(n=st.integers(0, 3), queue=st.sampled_from(["q1", "q2"]))
    def batch(self, n, queue):
        self.batches += 1
        callback = NewJob(name="n2", queue="q2", payload=encode_payload({"input": None}),
                          idempotency_key=f"callback-{self.batches}")
        self.both(lambda d: d.fanins.batch_open(NewBatch(n, [_members(n, queue)], callback)))

    @invariant()
    def same_fanins(self):
        for fanin_id in range(1, 12):
            mem, pg = store_of(self.memory).fanin_get(fanin_id), store_of(self.pg).fanin_get(fanin_id)
            shape = lambda v: v and (v.parent_id, v.step, v.waiter_id, v.total, v.pending, v.completed,
                                     v.dead, v.cancelled, v.woken, _time(v.created_at), _time(v.settled_at))
            assert shape(mem) == shape(pg)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree_on_fan_ins(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    tables = (*EXAMPLE_TABLES, "fanins")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        identities = conn.execute("select table_name, column_name from information_schema.columns "
                                  "where table_schema = %s and is_identity = 'YES' and table_name = any(%s)",
                                  (schema, list(tables))).fetchall()
        restart = "select setval(pg_get_serial_sequence('{}.{}', '{}'), 1, false)"
        empty = "; ".join([f"delete from {schema}.{table}" for table in tables]
                          + [restart.format(schema, table, column) for table, column in identities])

        def fresh_pair() -> FanInPair:
            conn.execute(empty)
            return FanInPair(pg_driver, clock)

        run_state_machine_as_test(fresh_pair, settings=settings(  # type: ignore[arg-type]
            max_examples=40, stateful_step_count=30, deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
