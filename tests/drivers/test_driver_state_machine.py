"""Random sequences of driver verbs, applied to a MemoryDriver and a PostgresDriver in step.

Hypothesis drives enqueue (with duplicate keys, delays, priorities, dedupe windows, debounce), claim
(ordinary and alone), ack, nack (retry, dead, park, not counting, snooze), heartbeat, progress, cancel,
requeue, bulk requeue and cancel, rescue, release (crashed or not), pause, prune, priority aging, durable
steps (put, sleep, wait, retry from a step, list; and ``work``, a worker's turn that replays a job's
body of steps), events (send, prune), wake and the clock; after every step
both drivers must hold the same rows. The Postgres tables are emptied and their identities
restarted between examples, so job and event ids line up and are compared as they are; only
lease tokens differ (each driver draws its own), so a lease is the pair of them. A step's
``seq`` is compared by its order only: it orders a job's steps, and Postgres draws it from an
identity that an ``on conflict`` insert consumes too, so its values have gaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant, multiple,
                                 rule, run_state_machine_as_test)

from xjobs.drivers.base import (Aging, Batch, Claim, ClaimAlone, Dispatch, Lease, ListFilter, Nack, NewEvent,
                                NewJob, Progress, Slot, SlotRequest, StepResult, StepSleep, StepWait,
                                TenantRoom, WorkerExit)
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
# few names, so a later attempt reaches a step recorded earlier (or as another kind of step)
STEP_NAMES = ("s1", "s2", "s3")
EVENTS, EVENT_KEYS = ("e1", "e2"), ("", "k1")
VALUES = (None, 1, "x", {"b": [1, 2.5], "a": None})
# what ``work`` runs of a job (picked by its id), as a body of ctx.step calls would: every
# attempt replays it from the top; ("sleep", name, ms), ("wait", name, event, key, timeout, poll)
BODIES: tuple[tuple[tuple[Any, ...], ...], ...] = (
    (("sleep", "s1", 0), ("wait", "s2", "e1", "k1", None, None), ("put", "s3")),
    (("put", "s1"), ("sleep", "s2", 300), ("wait", "s3", "e1", "k1", 2000, None)),
    (("wait", "s1", "e1", "", None, 300), ("sleep", "s2", 1500), ("put", "s3")),
    (("put", "s1"), ("wait", "s2", "e2", "k1", 500, None)),
)


def _outcome(outcome) -> tuple:
    return (outcome.done, outcome.value, _time(outcome.wake_at), outcome.timed_out, outcome.fenced)


def _reopened(view) -> tuple:
    return (_row(view), _steps(view.steps))


def _log(log) -> tuple:
    return (_time(log.now_ms), _steps(log.steps))


def _steps(steps) -> list[tuple]:
    """A job's steps as both drivers must agree on them: ``seq`` by its order only."""
    seqs = [s.seq for s in steps]
    assert seqs == sorted(set(seqs)), seqs
    return [(s.name, s.kind, s.state, s.attempt, s.result, _time(s.started_at), _time(s.finished_at),
             _time(s.wake_at), s.event, s.event_key, s.timed_out) for s in steps]


def _claim_pair(mem, pg):
    assert (mem.ids, [j.document()["k"] for j in mem.jobs]) == (pg.ids, [j.document()["k"] for j in pg.jobs])
    return (mem, pg)


def _nack(job_id: int, token: int, outcome: str, error: str | None, delay: float) -> Nack:
    """A settlement as the worker writes one: a shed, a suspension or a snooze carries no error,
    and a dead letter no delay."""
    return Nack(job_id, token, outcome, None if outcome in ("shed", "suspended", "snoozed") else error,  # type: ignore[arg-type]
                0.0 if outcome == "dead" else delay)


class DriverPair(RuleBasedStateMachine):
    leases = Bundle("leases")
    outbox_claims = Bundle("outbox_claims")

    def __init__(self, pg, clock) -> None:
        super().__init__()
        self.pg, self.clock = pg, clock
        self.memory = MemoryDriver(clock=clock)
        self.enqueued = 0
        self.started = 0

    def both(self, call):
        mem, pg = _answer(lambda: call(self.memory)), _answer(lambda: call(self.pg))
        assert mem == pg
        return mem

    def both_held(self, lease, call):
        """``call(driver, lease)`` on each driver with its own token of the pair."""
        job_id, mem_token, pg_token = lease
        mem = _answer(lambda: call(self.memory, Lease(job_id, mem_token)))
        pg = _answer(lambda: call(self.pg, Lease(job_id, pg_token)))
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

    @rule(keys=st.lists(st.sampled_from("ab"), min_size=1, max_size=3), n=st.integers(0, 3),
          debounce=st.sampled_from([300, 1000]), most=st.sampled_from([1000, 2500]))
    def enqueue_debounced(self, keys, n, debounce, most):
        """Debounced enqueues as ``build_jobs`` makes them: due after the debounce, and moving a
        held key's job that has not started (``Enqueued.debounced``)."""
        jobs = [NewJob(name="n2", queue="q1", payload=encode_payload({"key": k, "n": n + i}), idempotency_key=k,
                       delay_ms=debounce, debounce_ms=debounce, debounce_max_ms=most) for i, k in enumerate(keys)]
        self.enqueued += len(jobs)
        self.both(lambda d: d.job_enqueue(jobs))

    @rule(target=leases, queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=2, unique=True),
          limit=st.integers(0, 3), lease_ms=st.sampled_from([500, 1000, 3000]),
          worker=st.sampled_from(WORKERS))
    def claim(self, queues, limit, lease_ms, worker):
        mem = self.memory.job_claim(Claim(queues, limit, lease_ms, worker))
        pg = self.pg.job_claim(Claim(queues, limit, lease_ms, worker))
        return self.remember(mem, pg)

    @rule(target=leases, queue=st.sampled_from(QUEUES), limit=st.integers(0, 3),
          caps=st.dictionaries(st.sampled_from(["n1", "n2"]), st.integers(1, 2)),
          tenants=st.none() | st.builds(
              TenantRoom, ceiling=st.none() | st.integers(0, 2),
              held=st.dictionaries(st.sampled_from(["", "t1"]), st.integers(0, 2)),
              blocked=st.lists(st.sampled_from(["", "t1"]), unique=True).map(tuple)),
          worker=st.sampled_from(WORKERS))
    def claim_filtered(self, queue, limit, caps, tenants, worker):
        mem = self.memory.job_claim(Claim([queue], limit, 1000, worker, caps=caps, tenants=tenants))
        pg = self.pg.job_claim(Claim([queue], limit, 1000, worker, caps=caps, tenants=tenants))
        return self.remember(mem, pg)

    def remember(self, mem, pg):
        strip = lambda jobs: [(j.id, j.name, j.queue, j.payload, j.tenant, j.attempt, j.max_attempts,
                               j.priority, j.snoozes) for j in jobs]
        assert strip(mem) == strip(pg)
        return multiple(*[(m.id, m.token, p.token) for m, p in zip(mem, pg)])

    @rule(lease=leases)
    def ack(self, lease):
        job_id, mem_token, pg_token = lease
        assert self.memory.job_ack(job_id, mem_token) == self.pg.job_ack(job_id, pg_token)

    @rule(batch=st.lists(leases, min_size=1, max_size=3), values=st.lists(st.sampled_from(VALUES), min_size=3, max_size=3))
    def ack_many(self, batch, values):
        results = {i: orjson.dumps(v) for (i, _, _), v in zip(batch, values) if v is not None}   # a body's returns
        mem = self.memory.job_ack_many([Lease(i, m) for i, m, _ in batch], results)
        pg = self.pg.job_ack_many([Lease(i, p) for i, _, p in batch], results)
        assert mem == pg

    @rule(data=st.data())
    def await_settled(self, data):   # what xjobs.result reads: without waiting, the same answer
        job_id = data.draw(st.integers(1, self.enqueued + 1), label="job_id")
        self.both(lambda d: d.job_await(job_id, 0))

    @rule(lease=leases, outcome=st.sampled_from(["retried", "dead", "suspended", "interrupted", "shed", "snoozed"]),
          delay=st.sampled_from([0, 300, 1500]), error=st.sampled_from([None, "boom"]))
    def nack(self, lease, outcome, delay, error):
        job_id, mem_token, pg_token = lease
        assert self.memory.job_nack(_nack(job_id, mem_token, outcome, error, delay)) == \
            self.pg.job_nack(_nack(job_id, pg_token, outcome, error, delay))

    @rule(batch=st.lists(st.tuples(leases, st.sampled_from(["retried", "dead", "interrupted", "shed"])),
                         min_size=1, max_size=3, unique_by=lambda pair: pair[0][0]),
          delay=st.sampled_from([0, 700]))
    def nack_many(self, batch, delay):
        mem = self.memory.job_nack_many([_nack(i, m, outcome, "many", delay) for (i, m, _), outcome in batch])
        pg = self.pg.job_nack_many([_nack(i, p, outcome, "many", delay) for (i, _, p), outcome in batch])
        assert mem == pg

    @rule(batch=st.lists(leases, min_size=1, max_size=3), lease_ms=st.sampled_from([500, 2000]))
    def heartbeat(self, batch, lease_ms):
        mem = self.memory.job_renew_many([Lease(i, m) for i, m, _ in batch], lease_ms)
        pg = self.pg.job_renew_many([Lease(i, p) for i, _, p in batch], lease_ms)
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
        self.both(lambda d: d.job_release_worker(WorkerExit(worker, crashed=crashed, how="killed", charge=charge)))

    @rule(target=leases, queue=st.sampled_from(QUEUES), lease_ms=st.sampled_from([500, 3000]),
          worker=st.sampled_from(WORKERS), waited=st.sampled_from([0, 1000]), limit=st.integers(1, 4))
    def claim_alone(self, queue, lease_ms, worker, waited, limit):
        mem = self.memory.job_claim_alone(ClaimAlone(queue, lease_ms, worker, waited, limit=limit))
        pg = self.pg.job_claim_alone(ClaimAlone(queue, lease_ms, worker, waited, limit=limit))
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
        self.both(lambda d: d.job_requeue_batch(Batch(where, after, upto, limit), "bulk"))

    @rule(queue=st.sampled_from([None, *QUEUES]), after=st.integers(0, 3), upto=st.sampled_from([3, 100]),
          limit=st.integers(0, 3), ago=st.sampled_from([None, 500]))
    def cancel_batch(self, queue, after, upto, limit, ago):
        where = ListFilter(queue=queue, until_ago_ms=ago)
        self.both(lambda d: d.job_cancel_batch(Batch(where, after, upto, limit), "bulk"))

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

    @rule(queue=st.sampled_from(QUEUES), step=st.sampled_from([1, 250, 1000]), floor=st.integers(-1, 1), limit=st.integers(0, 3))
    def age(self, queue, step, floor, limit):   # job(aging=): the upkeep's batch of one queue
        self.both(lambda d: d.job_age(Aging(queue, step, floor), limit))

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
            self.both(lambda d: d.slot_acquire(SlotRequest(job, cap, holder, 1000)))
        elif verb == "renew":
            self.both(lambda d: d.slot_renew(Slot(job, slot, holder), 1000))
        else:
            self.both(lambda d: d.slot_release(Slot(job, slot, holder)))

    @initialize()
    def ready_jobs(self):
        """A job in each queue to begin with, so a short example still has runs to step through."""
        jobs = [NewJob(name="n1", queue=q, payload=encode_payload({"init": q}),
                       idempotency_key=f"init:{q}", max_attempts=2) for q in QUEUES]
        self.enqueued += len(jobs)
        self.both(lambda d: d.job_enqueue(jobs))

    @rule(target=leases, queue=st.sampled_from(QUEUES), worker=st.sampled_from(WORKERS))
    def start(self, queue, worker):
        """A fresh job, claimed at once: what the step verbs need is a run that holds its job
        (the claim may hand out an older ready job of the queue instead; a lease all the same)."""
        self.started += 1
        job = NewJob(name="n1", queue=queue, payload=encode_payload({"run": self.started}),
                     idempotency_key=f"run{self.started}", max_attempts=2)
        self.enqueued += 1
        self.both(lambda d: d.job_enqueue([job]))
        mem = self.memory.job_claim(Claim([queue], 1, 3000, worker))
        pg = self.pg.job_claim(Claim([queue], 1, 3000, worker))
        return self.remember(mem, pg)

    @rule(target=leases, queue=st.sampled_from(QUEUES), worker=st.sampled_from(WORKERS),
          idle=st.sampled_from([0, 0, 300, 1500]))
    def work(self, queue, worker, idle):
        """One turn of a worker, ``idle`` ms after its last: wake due suspensions, claim one job
        and run its body of steps until a step parks it (or the run lost its job), acking it
        when the body is done."""
        self.clock.advance(idle)
        self.both(lambda d: d.job_wake(10))
        mem = self.memory.job_claim(Claim([queue], 1, 3000, worker))
        pg = self.pg.job_claim(Claim([queue], 1, 3000, worker))
        claimed = self.remember(mem, pg)
        for m, p in zip(mem, pg):
            self.run_body((m.id, m.token, p.token), m.attempt)
        return claimed

    def run_body(self, lease, attempt):
        """The job's body (``BODIES``) from the top, as attempt ``attempt``, on both drivers."""
        for op in BODIES[lease[0] % len(BODIES)]:
            if op[0] == "put":
                result = StepResult(op[1], orjson.dumps({"job": lease[0], "step": op[1]}), attempt, 5)
                self.both_held(lease, lambda d, held: d.step_put(held, result))
                continue
            if op[0] == "sleep":
                sleep = StepSleep(op[1], op[2], attempt)
                answer = self.both_held(lease, lambda d, held: _outcome(d.step_sleep(held, sleep)))
            else:
                wait = StepWait(op[1], op[2], op[3], op[4], op[5], attempt)
                answer = self.both_held(lease, lambda d, held: _outcome(d.step_wait(held, wait)))
            if answer[0] != "ok" or not answer[1][0]:
                return                        # parked, fenced or refused: the run ends here
        job_id, mem_token, pg_token = lease
        assert self.memory.job_ack(job_id, mem_token) == self.pg.job_ack(job_id, pg_token)

    @rule(lease=leases, name=st.sampled_from(STEP_NAMES), value=st.sampled_from(VALUES),
          attempt=st.integers(1, 3), duration=st.sampled_from([0, 40]))
    def step_put(self, lease, name, value, attempt, duration):
        result = StepResult(name, orjson.dumps(value), attempt, duration)
        self.both_held(lease, lambda d, held: d.step_put(held, result))

    @rule(lease=leases, name=st.sampled_from(STEP_NAMES), duration=st.sampled_from([0, 300, 1500]),
          attempt=st.integers(1, 3))
    def step_sleep(self, lease, name, duration, attempt):
        sleep = StepSleep(name, duration, attempt)
        self.both_held(lease, lambda d, held: _outcome(d.step_sleep(held, sleep)))

    @rule(lease=leases, name=st.sampled_from(STEP_NAMES), event=st.sampled_from(EVENTS),
          key=st.sampled_from(EVENT_KEYS), timeout=st.sampled_from([None, 0, 500, 2000]),
          poll=st.sampled_from([None, None, 300]), attempt=st.integers(1, 3))
    def step_wait(self, lease, name, event, key, timeout, poll, attempt):
        wait = StepWait(name, event, key, timeout, poll, attempt)
        self.both_held(lease, lambda d, held: _outcome(d.step_wait(held, wait)))

    @rule(event=st.sampled_from(EVENTS), key=st.sampled_from(EVENT_KEYS), value=st.sampled_from(VALUES))
    def event_send(self, event, key, value):
        sent = NewEvent(event, key, orjson.dumps(value))
        self.both(lambda d: d.event_send(sent))

    @rule(retention=st.sampled_from([0, 1000]), limit=st.integers(0, 3))
    def event_prune(self, retention, limit):
        self.both(lambda d: d.event_prune(retention, limit))

    @rule(limit=st.integers(0, 4))
    def wake(self, limit):
        self.both(lambda d: d.job_wake(limit))

    @rule(data=st.data(), name=st.sampled_from(STEP_NAMES))
    def step_reopen(self, data, name):
        job_id = data.draw(st.integers(1, self.enqueued + 1), label="job_id")
        self.both(lambda d: _reopened(d.step_reopen(job_id, name)))

    @rule(data=st.data())
    def step_list(self, data):
        job_id = data.draw(st.integers(1, self.enqueued + 1), label="job_id")
        self.both(lambda d: _log(d.step_list(job_id)))

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
        assert self.memory.queue_waiting() == self.pg.queue_waiting()
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
            assert (mem.payload, mem.result, mem.base_priority) == (pg.payload, pg.result, pg.base_priority)
            assert _steps(mem.steps) == _steps(pg.steps)
            assert [(_time(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in mem.history] == \
                [(_time(h["at"]), h["attempt"], h["outcome"], h["error"]) for h in pg.history]


# the tables an example writes, emptied before the next one
EXAMPLE_TABLES = ("jobs", "job_history", "queues", "crashed_workers", "scheduler_leader", "scheduler_state",
                  "outbox", "job_slots", "job_steps", "events")


# 60 examples of 30 steps on both drivers: about 40 s alone, more beside the suite's daemons
@pytest.mark.slow
@pytest.mark.timeout(360)
def test_memory_and_postgres_drivers_agree(pg_driver, pg_dsn, clock):
    schema = pg_driver.schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        identities = conn.execute("select table_name, column_name from information_schema.columns "
                                  "where table_schema = %s and is_identity = 'YES' and table_name = any(%s)",
                                  (schema, list(EXAMPLE_TABLES))).fetchall()
        # delete and setval, as truncate ... restart identity does, at a tenth of its cost: a
        # truncate swaps every table's files, and a few rows are all an example leaves
        restart = "select setval(pg_get_serial_sequence('{}.{}', '{}'), 1, false)"
        empty = "; ".join([f"delete from {schema}.{table}" for table in EXAMPLE_TABLES]
                          + [restart.format(schema, table, column) for table, column in identities])

        def fresh_pair() -> DriverPair:
            conn.execute(empty)
            return DriverPair(pg_driver, clock)

        run_state_machine_as_test(fresh_pair, settings=settings(  # type: ignore[arg-type]
            max_examples=60, stateful_step_count=30, deadline=None,
            # no explain phase: on a failure it re-runs the example many times against
            # Postgres only to annotate the report
            phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
