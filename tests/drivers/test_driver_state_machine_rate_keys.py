"""The driver state machine with rate keys: every rule of
``test_driver_state_machine.DriverPair`` (claim, ack, nack, cancel, requeue, rescue, prune, the
clock, ...), its enqueue giving every job a rate key and its claim taking the batch's starts
as a worker does, interleaved with takes of held jobs' starts (a
batch of leases, live or stale, under a cap and a period) and prunes of old windows, on both
drivers, comparing every answer, every row, every key's window and every start time after each
step. The claims of the base rules go through the filter that leaves a full key's jobs ready."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, invariant, multiple, rule,
                                 run_state_machine_as_test)

from tests.drivers.test_driver_state_machine import EXAMPLE_TABLES, QUEUES, DriverPair, _time, new_jobs
from xjobs.drivers.base import Claim, ListFilter, Nack, NewJob
from xjobs.drivers.memory import MemoryDriver
from xjobs.drivers.rate_keys import RateAsk, RateKeyStore, rate_keys_of
from xjobs.payload import encode_payload

pytestmark = pytest.mark.postgres


def _store(driver: object) -> RateKeyStore:
    store = rate_keys_of(driver)
    assert store is not None
    return store


class RateKeyPair(DriverPair):
    # the base machine's enqueue, each job with a rate key or none: most rows of this machine
    # are rated, so the base rules' claims pass through the filter of full keys
    @rule(specs=st.lists(st.tuples(new_jobs, st.sampled_from(["r1", "r1", "r2"])), min_size=1, max_size=3),
          by=st.sampled_from([None, "cli"]))
    def enqueue(self, specs, by):
        now = self.clock.now_ms()
        jobs = [NewJob(name=s.name, queue=s.queue, payload=encode_payload({"key": s.key, "n": s.n}),
                       idempotency_key=s.key, tenant=s.tenant, enqueued_by=by, priority=s.priority,
                       max_attempts=s.attempts, run_at_ms=None if s.delay is None else now + s.delay,
                       dedupe_window_ms=s.window, rate_key=rate_key)
                for s, rate_key in specs]
        self.enqueued += len(jobs)
        self.both(lambda d: d.job_enqueue(jobs))

    @rule(batch=st.lists(DriverPair.leases, min_size=1, max_size=4, unique_by=lambda lease: lease[0]),
          cap=st.integers(1, 2), period=st.sampled_from([1000.0, 2500.0]))
    def rate_take(self, batch, cap, period):
        shape = lambda grants: [(g.job_id, g.granted, round(g.next_ms, 2)) for g in grants]
        mem = shape(_store(self.memory).rate_take([RateAsk(i, m, cap, period) for i, m, _ in batch]))
        pg = shape(_store(self.pg).rate_take([RateAsk(i, p, cap, period) for i, _, p in batch]))
        assert mem == pg

    # the base machine's claim, as a worker takes its turn: claim a batch, then take the starts
    # of its jobs in one statement
    @rule(target=DriverPair.leases, queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True),
          limit=st.integers(0, 4), lease_ms=st.sampled_from([500, 1000, 3000]),
          worker=st.sampled_from(["w1", "w2"]), cap=st.integers(1, 2), period=st.sampled_from([1000.0, 2500.0]))
    def claim(self, queues, limit, lease_ms, worker, cap, period):
        mem = self.memory.job_claim(Claim(queues, limit, lease_ms, worker))
        pg = self.pg.job_claim(Claim(queues, limit, lease_ms, worker))
        held = self.remember(mem, pg)
        shape = lambda grants: [(g.job_id, g.granted, round(g.next_ms, 2)) for g in grants]
        assert shape(_store(self.memory).rate_take([RateAsk(j.id, j.token, cap, period) for j in mem])) == \
            shape(_store(self.pg).rate_take([RateAsk(j.id, j.token, cap, period) for j in pg]))
        return held

    @rule(age=st.sampled_from([0.0, 1000.0, 5000.0]))
    def rate_key_prune(self, age):
        self.both(lambda d: _store(d).rate_key_prune(age))

    @invariant()
    def same_windows(self):
        for job_id in range(1, self.enqueued + 2):
            shape = lambda w: w and (w.key, w.cap, w.n, w.period_ms, _time(w.opens), _time(w.until))
            assert shape(_store(self.memory).rate_key_wait(job_id)) == shape(_store(self.pg).rate_key_wait(job_id))
        everything = ListFilter(limit=1000)
        started = lambda d: [(v.id, _time(d.job_get(v.id).started_at)) for v in d.job_list(everything)]
        assert started(self.memory) == started(self.pg)


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree_on_rate_keys(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    tables = (*EXAMPLE_TABLES, "rate_keys")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        identities = conn.execute("select table_name, column_name from information_schema.columns "
                                  "where table_schema = %s and is_identity = 'YES' and table_name = any(%s)",
                                  (schema, list(tables))).fetchall()
        restart = "select setval(pg_get_serial_sequence('{}.{}', '{}'), 1, false)"
        empty = "; ".join([f"delete from {schema}.{table}" for table in tables]
                          + [restart.format(schema, table, column) for table, column in identities])

        start = clock.now_ms()

        def fresh_pair() -> RateKeyPair:
            clock.advance(start - clock.now_ms())   # every example from the same time: windows align alike
            conn.execute(empty)
            return RateKeyPair(pg_driver, clock)

        run_state_machine_as_test(fresh_pair, settings=settings(  # type: ignore[arg-type]
            max_examples=20, stateful_step_count=30, deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


class RateKeyMachine(RuleBasedStateMachine):
    """Only what rate keys touch, so every step counts: rated and unrated enqueues, a worker's
    turn (claim a batch, take its starts, shed the refused to their opening as the worker does),
    acks, the clock and the prune; rows, start times and windows compared after each step."""

    held = Bundle("held")

    def __init__(self, pg, clock) -> None:
        super().__init__()
        self.pg, self.clock = pg, clock
        self.memory = MemoryDriver(clock=clock)
        self.enqueued = 0

    @rule(specs=st.lists(st.tuples(st.sampled_from(["n1", "n2"]), st.sampled_from(["r1", "r1", "r2", None]),
                                   st.sampled_from([None, 0, 700])), min_size=1, max_size=6))
    def enqueue(self, specs):
        now = self.clock.now_ms()
        jobs = [NewJob(name=name, queue="q1", payload=encode_payload({"i": self.enqueued + i}),
                       idempotency_key=f"k{self.enqueued + i}", rate_key=key,
                       run_at_ms=None if delay is None else now + delay)
                for i, (name, key, delay) in enumerate(specs)]
        self.enqueued += len(jobs)
        assert self.memory.job_enqueue(jobs) == self.pg.job_enqueue(jobs)

    @rule(target=held, limit=st.integers(1, 5), split=st.integers(0, 5), cap=st.integers(1, 3),
          period=st.sampled_from([1000.0, 2500.0]))
    def turn(self, limit, split, cap, period):
        """Claim a batch and take its starts in two statements (the first ``split`` jobs, then
        the rest), so a take often finds its key's window already counting."""
        mem = self.memory.job_claim(Claim(["q1"], limit, 60_000, "w1"))
        pg = self.pg.job_claim(Claim(["q1"], limit, 60_000, "w1"))
        assert [j.id for j in mem] == [j.id for j in pg]
        granted = []
        for driver, jobs in ((self.memory, mem), (self.pg, pg)):
            store = _store(driver)
            grants = [g for part in (jobs[:split], jobs[split:])
                      for g in store.rate_take([RateAsk(j.id, j.token, cap, period) for j in part])]
            granted.append([(g.job_id, g.granted, round(g.next_ms, 2)) for g in grants])
            tokens = {j.id: j.token for j in jobs}
            for g in grants:
                if not g.granted:
                    assert driver.job_nack(Nack(g.job_id, tokens[g.job_id], "shed", delay_ms=g.next_ms))
        assert granted[0] == granted[1]
        refused = {job_id for job_id, ok, _ in granted[0] if not ok}
        return multiple(*[(m.id, m.token, p.token) for m, p in zip(mem, pg) if m.id not in refused])

    @rule(lease=held)
    def ack(self, lease):
        job_id, mem_token, pg_token = lease
        assert self.memory.job_ack(job_id, mem_token) == self.pg.job_ack(job_id, pg_token)

    @rule(ms=st.sampled_from([1, 300, 999, 1000, 2500]))
    def advance(self, ms):
        self.clock.advance(ms)

    @rule(age=st.sampled_from([0.0, 1000.0]))
    def prune(self, age):
        assert _store(self.memory).rate_key_prune(age) == _store(self.pg).rate_key_prune(age)

    @invariant()
    def same_rows_and_windows(self):
        everything = ListFilter(limit=1000)
        row = lambda d, v: (v.id, v.state, v.attempt, _time(v.run_at), v.last_error,
                            _time(d.job_get(v.id).started_at))
        assert [row(self.memory, v) for v in self.memory.job_list(everything)] == \
            [row(self.pg, v) for v in self.pg.job_list(everything)]
        shape = lambda w: w and (w.key, w.cap, w.n, w.period_ms, _time(w.opens), _time(w.until))
        for job_id in range(1, self.enqueued + 1):
            assert shape(_store(self.memory).rate_key_wait(job_id)) == shape(_store(self.pg).rate_key_wait(job_id))


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree_on_a_workers_rate_key_turns(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        empty = (f"delete from {schema}.jobs; delete from {schema}.job_history; delete from {schema}.rate_keys; "
                 f"select setval(pg_get_serial_sequence('{schema}.jobs', 'id'), 1, false)")

        start = clock.now_ms()

        def fresh_machine() -> RateKeyMachine:
            clock.advance(start - clock.now_ms())   # every example from the same time: windows align alike
            conn.execute(empty)
            return RateKeyMachine(pg_driver, clock)

        run_state_machine_as_test(fresh_machine, settings=settings(  # type: ignore[arg-type]
            max_examples=40, stateful_step_count=25, deadline=None,
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
