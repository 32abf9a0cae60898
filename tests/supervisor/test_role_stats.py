"""Each role's stats record crosses the pipe as JSON and comes back the same, and says in one
line what ``xjobsd status`` prints for its child."""

from __future__ import annotations

import orjson
import pytest

from xjobs.supervisor.roles import ROLES
from xjobs.workers.queue_worker import QueueWorker
from xjobs.ui.listen import POLICY as DASHBOARD_POLICY, DashboardStats
from xjobs.workers.outbox_relay import RelayStats, relay_row
from xjobs.workers.scheduler import SchedulerStats
from xjobs.workers.stats import WorkerStats
from xjobs.workers.telemetry import Histogram, RoleStats

RECORDS = [
    WorkerStats(in_flight=2, claimed=9, completed=5, retried=1, lease_lost=1, steps_run=3, sweeps=2,
                jobs={"send": {"completed": 5, "retried": 1}},
                durations={"send": Histogram([1] * 15, 0.25, 6)},
                running=[{"id": 7, "name": "send", "attempt": 1, "seconds": 0.5, "alone": False,
                          "progress": None}], limits={"scope": "per worker process"}),
    SchedulerStats(in_flight=1, rounds=4, dispatched=3, rescued=5, leader=1, tasks=2,
                   jobs={"expire": {"completed": 2}}),
    RelayStats(published=10, batches=2, claim_failed=1, publish_failed=1, released=3),
    DashboardStats(requests=12, failed=1),
    RoleStats(in_flight=0),
]


def over_the_pipe(record: RoleStats) -> RoleStats:
    return type(record).from_wire(orjson.loads(orjson.dumps(record.to_wire())))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_comes_back_from_the_wire_as_it_was_sent(record):
    back = over_the_pipe(record)
    assert type(back) is type(record) and back.to_wire() == record.to_wire()
    assert back.numbers() == record.numbers() and back.job_counts() == record.job_counts()


def test_a_figure_of_the_wrong_type_keeps_its_default():
    back = RelayStats.from_wire({"published": "ten", "batches": 2, "fenced": True})
    assert (back.published, back.batches, back.fenced) == (0, 2, 0)
    worker = WorkerStats.from_wire({"claimed": 3, "jobs": {"send": {"completed": "x", "dead": 1}},
                                    "durations": {"send": {"buckets": "no"}}, "limits": []})
    assert (worker.claimed, worker.jobs, worker.durations, worker.limits) == (3, {"send": {"dead": 1}}, {}, None)


def test_each_role_describes_its_child_in_one_line():
    scheduler, relay, dashboard = RECORDS[1], RECORDS[2], RECORDS[3]
    assert scheduler.describe() == "LEADER; 2 task(s), 3 dispatched, 4 round(s), 5 rescued"
    assert SchedulerStats(tasks=1).describe() == "follower; 1 task(s), 0 dispatched, 0 round(s), 0 rescued"
    assert relay.describe() == "10 published in 2 batch(es), 2 failure(s)"
    assert dashboard.describe() == "12 request(s) answered, 1 with a server error"
    assert RoleStats(in_flight=1).describe() == "in_flight 1"


def test_levels_are_not_counters():
    scheduler = RECORDS[1]
    assert {"leader", "tasks", "in_flight"} <= set(scheduler.numbers())
    assert not {"leader", "tasks", "in_flight"} & set(scheduler.counters())
    assert scheduler.job_counts().outcomes == {"expire": {"completed": 2}}
    assert RECORDS[2].job_counts().claim_failed == 0   # a relay's failed claim is no queue's


def test_every_role_names_its_record_in_its_policy():
    kinds = {kind.role: kind.policy.stats for kind in ROLES}
    assert kinds == {"worker": WorkerStats, "scheduler": SchedulerStats, "outbox-relay": RelayStats}
    assert QueueWorker.policy.stats is WorkerStats and DASHBOARD_POLICY.stats is DashboardStats


def test_the_relay_is_found_among_the_children_of_a_status_answer():
    children: list[dict[str, object]] = [{"role": "worker", "queue": "q"}, {"role": "outbox-relay", "pid": 7}]
    assert relay_row(children) == {"role": "outbox-relay", "pid": 7}
    assert relay_row(children[:1]) is None
