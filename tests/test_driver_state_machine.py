"""Random sequences of driver verbs, applied to a MemoryDriver and a PostgresDriver in step.

Hypothesis drives enqueue (with duplicate keys, delays, priorities, dedupe windows), claim
(ordinary and alone), ack, nack (retry, dead, park, not counting), heartbeat, progress,
cancel, requeue, bulk requeue and cancel, rescue, release (crashed or not), pause, prune and
the clock;
after every step both drivers must hold the same rows. The Postgres tables are truncated with
``restart identity`` between examples, so job ids line up and are compared as they are; only
lease tokens differ (each driver draws its own), so a lease is the pair of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, invariant, multiple, rule,
                                 run_state_machine_as_test)

from xjobs.drivers.base import Dispatch, Lease, ListFilter, Nack, NewJob, Progress, TenantRoom
from xjobs.drivers.memory import MemoryDriver
from xjobs.errors import XJobsError
from xjobs.payload import encode_payload

pytestmark = pytest.mark.postgres

QUEUES = ("q1", "q2")
WORKERS = ("w1", "w2")

@dataclass(frozen=True)
class Spec:
    key: str
    name: str
    tenant: str | None
    queue: str
    priority: int
    delay: int | None
    attempts: int
    n: int
    window: int | None


new_jobs = st.builds(
    Spec, key=st.sampled_from("abcd"), name=st.sampled_from(["n1", "n2"]),
    tenant=st.sampled_from([None, "", "t1"]), queue=st.sampled_from(QUEUES),
    priority=st.integers(-1, 1), delay=st.sampled_from([None, 0, 500, 2000]),
    attempts=st.integers(1, 3), n=st.integers(0, 3), window=st.sampled_from([None, None, 1000, 5000]))


def _time(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _row(view) -> tuple:
    return (view.id, view.name, view.queue, view.state, view.attempt, view.max_attempts,
            view.tenant, view.idempotency_key, view.priority, _time(view.run_at), view.last_error,
            _time(view.created_at), _time(view.finished_at), view.enqueued_by, view.claimed_by,
            _time(view.lease_expires_at), view.crashes, view.progress)


def _answer(call):
    """What a verb answered: its value, or the code of the refusal it raised."""
    try:
        return ("ok", call())
    except XJobsError as err:
        return ("refused", err.code)


HOLDERS = ("d1", "d2")


def _claim_pair(mem, pg):
    assert (mem.ids, [j.document()["k"] for j in mem.jobs]) == (pg.ids, [j.document()["k"] for j in pg.jobs])
    return (mem, pg)


class DriverPair(RuleBasedStateMachine):
    leases = Bundle("leases")
    outbox_claims = Bundle("outbox_claims")

    def __init__(self, pg, clock) -> None:
        super().__init__()
        self.pg, self.clock = pg, clock
        self.memory = MemoryDriver(clock=clock)
        self.enqueued = 0

    def both(self, call):
        mem, pg = _answer(lambda: call(self.memory)), _answer(lambda: call(self.pg))
        assert mem == pg
        return mem

    @rule(specs=st.lists(new_jobs, min_size=1, max_size=3), by=st.sampled_from([None, "cli"]))
    def enqueue(self, specs, by):
        now = self.clock.now_ms()
        jobs = [NewJob(name=s.name, queue=s.queue, payload=encode_payload({"key": s.key, "n": s.n}),
                       idempotency_key=s.key, tenant=s.tenant, enqueued_by=by, priority=s.priority,
                       max_attempts=s.attempts, run_at_ms=None if s.delay is None else now + s.delay,
                       dedupe_window_ms=s.window)
                for s in specs]
        self.enqueued += len(jobs)
        self.both(lambda d: d.job_enqueue(jobs))

    @rule(target=leases, queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True),
          limit=st.integers(0, 3), lease_ms=st.sampled_from([500, 1000, 3000]),
          worker=st.sampled_from(WORKERS))
    def claim(self, queues, limit, lease_ms, worker):
        mem = self.memory.job_claim(queues, limit, lease_ms, worker)
        pg = self.pg.job_claim(queues, limit, lease_ms, worker)
        return self.remember(mem, pg)

    @rule(target=leases, queue=st.sampled_from(QUEUES), limit=st.integers(0, 3),
          caps=st.dictionaries(st.sampled_from(["n1", "n2"]), st.integers(1, 2)),
          tenants=st.none() | st.builds(
              TenantRoom, ceiling=st.none() | st.integers(0, 2),
              held=st.dictionaries(st.sampled_from(["", "t1"]), st.integers(0, 2)),
              blocked=st.lists(st.sampled_from(["", "t1"]), unique=True).map(tuple)),
          worker=st.sampled_from(WORKERS))
    def claim_filtered(self, queue, limit, caps, tenants, worker):
        mem = self.memory.job_claim([queue], limit, 1000, worker, caps=caps, tenants=tenants)
        pg = self.pg.job_claim([queue], limit, 1000, worker, caps=caps, tenants=tenants)
        return self.remember(mem, pg)

    def remember(self, mem, pg):
        strip = lambda jobs: [(j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts,
                               j.priority) for j in jobs]
        assert strip(mem) == strip(pg)
        return multiple(*[(m.id, m.token, p.token) for m, p in zip(mem, pg)])

    @rule(lease=leases)
    def ack(self, lease):
        job_id, mem_token, pg_token = lease
        assert self.memory.job_ack(job_id, mem_token) == self.pg.job_ack(job_id, pg_token)

    @rule(batch=st.lists(leases, min_size=1, max_size=3))
    def ack_many(self, batch):
        mem = self.memory.job_ack_many([Lease(i, m) for i, m, _ in batch])
        pg = self.pg.job_ack_many([Lease(i, p) for i, _, p in batch])
        assert mem == pg

    @rule(lease=leases, kind=st.sampled_from(["retry", "dead", "park", "interrupted", "shed"]),
          delay=st.sampled_from([0, 300, 1500]), error=st.sampled_from([None, "boom"]))
    def nack(self, lease, kind, delay, error):
        job_id, mem_token, pg_token = lease

        def settle(token):
            return Nack(job_id, token, error, delay_ms=delay, counts_as_attempt=kind in ("retry", "dead"),
                        park=kind == "park", dead=kind == "dead", outcome=kind)
        assert self.memory.job_nack(settle(mem_token)) == self.pg.job_nack(settle(pg_token))

    @rule(batch=st.lists(leases, min_size=1, max_size=3), lease_ms=st.sampled_from([500, 2000]))
    def heartbeat(self, batch, lease_ms):
        mem = self.memory.job_heartbeat_many([Lease(i, m) for i, m, _ in batch], lease_ms)
        pg = self.pg.job_heartbeat_many([Lease(i, p) for i, _, p in batch], lease_ms)
        assert mem == pg

    @rule(data=st.data(), reason=st.sampled_from([None, "operator"]))
    def cancel(self, data, reason):
        job_id = data.draw(st.integers(1, self.enqueued + 1), label="job_id")
        self.both(lambda d: _row(d.job_cancel(job_id, reason)))

    @rule(data=st.data())
    def requeue(self, data):
        job_id = data.draw(st.integers(1, self.enqueued + 1), label="job_id")
        self.both(lambda d: _row(d.job_requeue(job_id)))

    @rule(limit=st.integers(0, 4))
    def rescue(self, limit):
        self.both(lambda d: d.job_rescue(limit))

    @rule(worker=st.sampled_from(WORKERS), crashed=st.booleans(),
          charge=st.sampled_from(["alone", "suspect", "never"]))
    def release_worker(self, worker, crashed, charge):
        self.both(lambda d: d.job_release_worker(worker, crashed=crashed, how="killed", charge=charge))

    @rule(target=leases, queue=st.sampled_from(QUEUES), lease_ms=st.sampled_from([500, 3000]),
          worker=st.sampled_from(WORKERS), waited=st.sampled_from([0, 1000]))
    def claim_alone(self, queue, lease_ms, worker, waited):
        mem = self.memory.job_claim_alone(queue, lease_ms, worker, waited)
        pg = self.pg.job_claim_alone(queue, lease_ms, worker, waited)
        return self.remember(mem, pg)

    @rule(batch=st.lists(leases, min_size=1, max_size=2), done=st.sampled_from([0, 1.5, 7]))
    def progress(self, batch, done):
        at = self.clock.now_ms()
        mem = self.memory.job_progress_many([Progress(Lease(i, m), done, 10, "n", at) for i, m, _ in batch])
        pg = self.pg.job_progress_many([Progress(Lease(i, p), done, 10, "n", at) for i, _, p in batch])
        assert mem == pg

    @rule(state=st.sampled_from([None, "dead", "cancelled"]), after=st.integers(0, 3),
          upto=st.sampled_from([2, 6, 100]), limit=st.integers(0, 3),
          error=st.sampled_from([None, "lease", "boom"]), ago=st.sampled_from([None, 1000]))
    def requeue_batch(self, state, after, upto, limit, error, ago):
        where = ListFilter(state=state, error=error, since_ago_ms=ago)
        self.both(lambda d: d.job_requeue_batch(where, after, upto, limit, "bulk"))

    @rule(queue=st.sampled_from([None, *QUEUES]), after=st.integers(0, 3), upto=st.sampled_from([3, 100]),
          limit=st.integers(0, 3), ago=st.sampled_from([None, 500]))
    def cancel_batch(self, queue, after, upto, limit, ago):
        where = ListFilter(queue=queue, until_ago_ms=ago)
        self.both(lambda d: d.job_cancel_batch(where, after, upto, limit, "bulk"))

    @rule(states=st.sampled_from([["dead"], ["ready", "running"], ["cancelled", "dead"]]),
          ago=st.sampled_from([None, 700]))
    def count(self, states, ago):
        self.both(lambda d: d.job_count(ListFilter(since_ago_ms=ago), states))

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def pause(self, queue, paused):
        self.both(lambda d: d.queue_pause(queue, paused, "test"))

    @rule(completed_for=st.sampled_from([0, 1000]), finished_for=st.sampled_from([0, 3000]),
          limit=st.integers(0, 3))
    def prune(self, completed_for, finished_for, limit):
        self.both(lambda d: d.job_prune(completed_for, finished_for, limit))

    @rule(holder=st.sampled_from(HOLDERS), lease_ms=st.sampled_from([500, 2000]), resign=st.booleans())
    def leader(self, holder, lease_ms, resign):
        if resign:
            self.both(lambda d: d.leader_resign("scheduler", holder))
        else:
            self.both(lambda d: d.leader_elect("scheduler", holder, lease_ms))

    @rule(holder=st.sampled_from(HOLDERS), task=st.sampled_from(["t1", "t2"]),
          expected=st.sampled_from([None, 0, 1, 2]), keys=st.lists(st.sampled_from("abc"), max_size=2))
    def dispatch(self, holder, task, expected, keys):
        jobs = tuple(NewJob(name="n1", queue="q1", payload=b"{}", idempotency_key=f"{task}:{k}") for k in keys)
        watermark = (expected or 0) + 1
        self.both(lambda d: d.schedule_dispatch(Dispatch("scheduler", holder, task, expected, watermark, jobs)))

    @rule(keys=st.lists(st.sampled_from("abcd"), min_size=1, max_size=3))
    def stage(self, keys):
        jobs = [NewJob(name="n2", queue="q2", payload=encode_payload({"k": k}), idempotency_key=k) for k in keys]
        self.both(lambda d: d.outbox_stage(jobs, None))

    @rule(target=outbox_claims, limit=st.integers(0, 3), lease_ms=st.sampled_from([500, 2000]))
    def outbox_claim(self, limit, lease_ms):
        return _claim_pair(self.memory.outbox_claim("relay", limit, lease_ms),
                           self.pg.outbox_claim("relay", limit, lease_ms))

    @rule(pair=outbox_claims, publish=st.booleans())
    def outbox_finish(self, pair, publish):
        mem, pg = pair
        if publish:
            assert self.memory.outbox_publish(mem) == self.pg.outbox_publish(pg)
        else:
            assert self.memory.outbox_release(mem) == self.pg.outbox_release(pg)

    @rule(job=st.sampled_from(["n1", "n2"]), cap=st.integers(1, 2), holder=st.sampled_from(HOLDERS),
          verb=st.sampled_from(["acquire", "renew", "release"]), slot=st.integers(0, 1))
    def slots(self, job, cap, holder, verb, slot):
        if verb == "acquire":
            self.both(lambda d: d.slot_acquire(job, cap, holder, 1000))
        elif verb == "renew":
            self.both(lambda d: d.slot_renew(job, slot, holder, 1000))
        else:
            self.both(lambda d: d.slot_release(job, slot, holder))

    @rule(ms=st.sampled_from([1, 250, 500, 1000, 2500]))
    def advance(self, ms):
        self.clock.advance(ms)

    @invariant()
    def same_rows(self):
        everything = ListFilter(limit=1000)
        assert [_row(v) for v in self.memory.job_list(everything)] == \
            [_row(v) for v in self.pg.job_list(everything)]
        assert self.memory.job_stats() == self.pg.job_stats()
        assert self.memory.queue_counts() == self.pg.queue_counts()
        assert [(c.name, c.paused) for c in self.memory.queue_control()] == \
            [(c.name, c.paused) for c in self.pg.queue_control()]
        mem_leader, pg_leader = self.memory.leader_get("scheduler"), self.pg.leader_get("scheduler")
        assert (mem_leader and (mem_leader.holder, mem_leader.live)) == (pg_leader and (pg_leader.holder, pg_leader.live))
        assert [(w.task, w.watermark_ms, w.dispatched) for w in self.memory.schedule_state()] == \
            [(w.task, w.watermark_ms, w.dispatched) for w in self.pg.schedule_state()]
        assert self.memory.outbox_summary().pending == self.pg.outbox_summary().pending
        assert self.memory.slot_held() == self.pg.slot_held()
        mem, pg = self.memory.queue_summary(), self.pg.queue_summary()
        assert {q: (s.depth, _time(s.oldest_ready_ms)) for q, s in mem.items()} == \
            {q: (s.depth, _time(s.oldest_ready_ms)) for q, s in pg.items()}

    def teardown(self):
        """Histories are compared once per example: they only grow, so the end shows all."""
        for view in self.memory.job_list(ListFilter(limit=1000)):
            mem, pg = self.memory.job_get(view.id), self.pg.job_get(view.id)
            assert mem.payload == pg.payload
            assert [(_time(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in mem.history] == \
                [(_time(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in pg.history]


def test_memory_and_postgres_drivers_agree(pg_driver, pg_dsn, clock):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        def fresh_pair() -> DriverPair:
            conn.execute(f"truncate {pg_driver.schema}.jobs, {pg_driver.schema}.job_history, "
                         f"{pg_driver.schema}.queues, {pg_driver.schema}.crashed_workers, "
                         f"{pg_driver.schema}.scheduler_leader, {pg_driver.schema}.scheduler_state, "
                         f"{pg_driver.schema}.outbox, {pg_driver.schema}.job_slots restart identity")
            return DriverPair(pg_driver, clock)

        run_state_machine_as_test(fresh_pair, settings=settings(
            max_examples=60, stateful_step_count=30, deadline=None,
            # no explain phase: on a failure it re-runs the example many times against
            # Postgres only to annotate the report
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
