"""Fleet-wide job concurrency through real daemons: ``capped_work`` declares concurrency=3 and
two supervisors run four worker processes each for it. From the runs' recorded start and end
times, no instant has more than three running; jobs that found every slot taken were shed back
to ready (never suspended or failed, no attempt burned); and the slot of a holder killed with
SIGKILL is free again within its lease."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tests.daemon_fixtures import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

COORD = "tests.apps.coord_app"
JOBS = 60
LEASE_S = 4

MOST_AT_ONCE = """
    select coalesce(max(overlapping), 0) from (
        select (select count(*) from {schema}.spans other
                where other.began <= span.began and other.ended > span.began) as overlapping
        from {schema}.spans span) as at_each_start
"""


def holding_a_slot(env, daemons) -> tuple[object, dict] | None:
    holders = {holder for (holder,) in env.sql("select holder from {schema}.job_slots")}
    for daemon in daemons:
        for child in daemon.children():
            if child["identity"] in holders:
                return daemon, child
    return None


class StateWatch:
    """Samples the capped jobs' states while they run: a shed must never show as anything but
    ready (or the running it becomes)."""

    def __init__(self, env) -> None:
        self.env = env
        self.seen: set[str] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.05):
            for (state,) in self.env.sql("select distinct state from {schema}.jobs where name = 'capped_work'"):
                self.seen.add(state)

    def stop(self) -> set[str]:
        self.done.set()
        self.thread.join()
        return self.seen


@pytest.mark.slow
def test_three_slots_hold_across_two_daemons_sheds_stay_ready_and_a_killed_holder_frees_its_slot(daemon_env):
    env = daemon_env
    daemons = [env.start("--app", COORD, "--queue", "capped=4x4", XJOBS_LEASE=f"{LEASE_S}s",
                         XJOBS_HEARTBEAT="500ms") for _ in range(2)]
    for daemon in daemons:
        daemon.ready()
    watch = StateWatch(env)
    bursts = [[{"n": n, "seconds": 0.3} for n in range(start, start + JOBS // 4)] for start in range(0, JOBS, JOBS // 4)]
    ids: list[int] = []

    def enqueue_burst(inputs: list[dict]) -> None:
        # each burst's notification wakes all eight processes at once: they race for the slots
        ids.extend(env.enqueue("capped_work", "capped", inputs, lambda i: f"c:{i['n']}"))

    def completed() -> int:
        return env.one("select count(*) from {schema}.jobs where name = 'capped_work' and state = 'completed'")

    try:
        enqueue_burst(bursts[0])
        daemon, victim = wait_for(lambda: holding_a_slot(env, daemons), 20, "a worker holding a slot")
        held = env.sql("select slot from {schema}.job_slots where holder = %s", victim["identity"])
        assert held, "the running job's holder has a slot row"
        os.kill(victim["pid"], signal.SIGKILL)
        # the supervisor hands the dead worker's jobs back and frees its slots; failing that,
        # the slot's own lease runs out
        wait_for(lambda: not env.sql("select 1 from {schema}.job_slots where holder = %s", victim["identity"]),
                 LEASE_S + 1, "the killed holder's slot to be free")
        for burst in bursts[1:]:
            wait_for(lambda: completed() == len(ids), 60, "the burst to complete")
            enqueue_burst(burst)
        wait_for(lambda: completed() == JOBS, 60, "every capped job to complete")
    finally:
        seen = watch.stop()

    assert seen <= {"ready", "running", "completed"}, seen
    assert env.one(MOST_AT_ONCE) <= 3
    assert env.one("select count(*) from {schema}.spans") >= JOBS
    # a shed burns no attempt and leaves no error: only the jobs the killed worker held have either
    # (a job that then completed stands in no error: its first attempt's is in its history)
    marked = env.sql("select j.id, j.attempt, coalesce(j.last_error, h.error) from {schema}.jobs j "
                     "left join {schema}.job_history h on h.job_id = j.id and h.attempt = 1 "
                     "where j.id = any(%s) and (j.attempt <> 1 or j.last_error is not null)", ids)
    assert all(victim["identity"] in (error or "") for _, _, error in marked), marked
    assert len(marked) <= 4, marked    # at most what its four run slots held
    assert env.one("select count(*) from {schema}.job_slots") == 0
    sheds = sum(d.sample("xjobs_jobs", "xjobs_jobs_total", queue="capped", job_name="capped_work",
                          outcome="shed") for d in daemons)
    assert sheds > 0
    for daemon in daemons:
        daemon.signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(30) == 0
