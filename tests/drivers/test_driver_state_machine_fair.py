"""The driver state machine with fair claims: every rule of
``test_driver_state_machine.DriverPair`` (enqueue, claim, ack, nack, cancel, requeue, rescue,
release, prune, ...) interleaved with enqueues of keyed jobs and fair claims, on both drivers,
comparing every answer, every row and each queue's rotation (keys and passes) after each step,
and where a job stands in it (``fair_place``)."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from tests.drivers.test_driver_state_machine import EXAMPLE_TABLES, QUEUES, WORKERS, DriverPair
from xjobs.drivers.base import NewJob
from xjobs.drivers.fair import FairClaim, FairClaims
from xjobs.payload import encode_payload

pytestmark = pytest.mark.postgres

KEYS = ("k1", "k2", "k3")


def fair(driver) -> FairClaims:
    assert driver.fair is not None   # both drivers have fair claims
    return driver.fair


class FairPair(DriverPair):
    def __init__(self, pg, clock) -> None:
        super().__init__(pg, clock)
        self.keyed = 0

    @rule(jobs=st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(QUEUES), st.integers(-1, 1),
                                  st.sampled_from([None, 0, 500, 2000])), min_size=1, max_size=4))
    def enqueue_keyed(self, jobs):
        now = self.clock.now_ms()
        batch = []
        for key, queue, priority, delay in jobs:
            self.keyed += 1
            batch.append(NewJob(name="n1", queue=queue, payload=encode_payload({"n": self.keyed}),
                                idempotency_key=f"fair-{self.keyed}", tenant=key, priority=priority,
                                run_at_ms=None if delay is None else now + delay, fair_key=key))
        self.enqueued += len(batch)
        self.both(lambda d: d.job_enqueue(batch))

    @rule(target=DriverPair.leases, queue=st.sampled_from(QUEUES), limit=st.integers(0, 3),
          weights=st.dictionaries(st.sampled_from(KEYS), st.sampled_from([0.5, 1.0, 3.0]), max_size=2),
          names=st.sampled_from([None, ["n1"], ["n2"]]), worker=st.sampled_from(WORKERS))
    def claim_fair(self, queue, limit, weights, names, worker):
        mem = fair(self.memory).job_claim_fair(FairClaim(queue, limit, 1000, worker, weights, names))
        pg = fair(self.pg).job_claim_fair(FairClaim(queue, limit, 1000, worker, weights, names))
        return self.remember(mem, pg)

    @rule(job_id=st.integers(1, 30))
    def same_place(self, job_id):
        assert fair(self.memory).fair_place(job_id) == fair(self.pg).fair_place(job_id)

    @invariant()
    def same_turns(self):
        for queue in QUEUES:
            assert fair(self.memory).fair_turns(queue) == fair(self.pg).fair_turns(queue)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree_on_fair_claims(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    tables = (*EXAMPLE_TABLES, "fair_tenants")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        identities = conn.execute("select table_name, column_name from information_schema.columns "
                                  "where table_schema = %s and is_identity = 'YES' and table_name = any(%s)",
                                  (schema, list(tables))).fetchall()
        restart = "select setval(pg_get_serial_sequence('{}.{}', '{}'), 1, false)"
        empty = "; ".join([f"delete from {schema}.{table}" for table in tables]
                          + [restart.format(schema, table, column) for table, column in identities])

        def fresh_pair() -> FairPair:
            conn.execute(empty)
            return FairPair(pg_driver, clock)

        run_state_machine_as_test(fresh_pair, settings=settings(  # type: ignore[arg-type]
            max_examples=40, stateful_step_count=30, deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
