"""``xjobsd tick`` as a cron runs it: a subprocess with a deadline, its summary and exit code."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import orjson
import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
APP = "tests.apps.tick_app"


def tick(env, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "xjobs.cli", "tick", "--app", APP, "--json", *args],
                            cwd=ROOT, env=env.process_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=60)
    assert out, err
    return proc.returncode, orjson.loads(out)


def due_minute(env) -> None:
    """The task's watermark just before the last minute boundary: exactly one occurrence is due,
    and the next boundary is at least 15 s away, past every tick of the test (one that crossed it
    would find a second occurrence due)."""
    left_s = float(env.one("select 60 - extract(epoch from now())::numeric % 60"))
    if left_s < 15:
        time.sleep(left_s + 0.05)   # a time, not a synchronisation: the next minute begins
    env.sql("insert into {schema}.scheduler_state (task, watermark_ms, updated_at) "
            "values ('every_minute', (floor(extract(epoch from now()) / 60) * 60 - 1) * 1000, now())")


def enqueue_work(env, per_queue: int = 4) -> None:
    for n in range(1, 6):
        env.enqueue(f"work_t{n}", f"t{n}", [{"n": i} for i in range(per_queue)], key=lambda i, n=n: f"t{n}:{i['n']}")


@pytest.mark.timing
def test_a_tick_isolates_a_failure_hands_back_a_hung_job_and_fires_cron_once(daemon_env):
    env = daemon_env
    due_minute(env)
    enqueue_work(env)
    [failing] = env.enqueue("fails", "t1", [{"n": 1}], key=lambda i: "fails:1")
    [hung] = env.enqueue("hangs", "t2", [{"n": 1}], key=lambda i: "hangs:1")
    began = time.monotonic()
    code, summary = finish(tick(env, "--deadline", "3s"))
    took = time.monotonic() - began
    assert code == 1 and summary["failed"] and summary["reached_deadline"]
    assert summary["elapsed_s"] <= 3 + 1, summary
    assert took < 3 + 1 + 3, took            # plus the interpreter's start and the app's import
    assert summary["cron"]["dispatched"] == 1 and summary["cron"]["leader"] is True
    for n in range(1, 6):
        assert summary["jobs"][f"work_t{n}"] == {"completed": 4}        # siblings untouched
    assert summary["jobs"]["minutely"] == {"completed": 1}
    assert summary["jobs"]["fails"] == {"retried": 1}
    [failure] = summary["failures"]
    assert (failure["job_id"], failure["name"], failure["dead"]) == (failing, "fails", False)
    assert "ValueError: the upstream said no" in failure["error"] and failure["verdict"].startswith("retry 2/")
    assert summary["abandoned"] == 1
    assert env.job(hung)["state"] == "ready" and env.job(hung)["attempt"] == 0     # no attempt spent
    assert env.one("select count(*) from {schema}.jobs where name = 'minutely'") == 1


def test_a_tick_with_nothing_failing_exits_zero_and_two_ticks_fire_an_occurrence_once(daemon_env):
    env = daemon_env
    due_minute(env)
    enqueue_work(env, per_queue=2)
    first, second = tick(env, "--deadline", "5s"), tick(env, "--deadline", "5s")
    (code_a, a), (code_b, b) = finish(first), finish(second)
    assert (code_a, code_b) == (0, 0) and not a["reached_deadline"] and not b["reached_deadline"]
    assert a["cron"]["dispatched"] + b["cron"]["dispatched"] == 1
    assert env.one("select count(*) from {schema}.jobs where name = 'minutely'") == 1
    ran = env.one("select count(*) from {schema}.effects where name like 'work_t%'")
    assert ran == 10 and env.one("select count(*) from {schema}.jobs where state <> 'completed'") == 0
    assert env.one("select count(distinct job_id) from {schema}.effects where name <> 'reconcile'") == 11
    # the scan ran once in one of the two passes, not in the later one (its hour is not up)
    assert env.one("select count(*) from {schema}.effects where name = 'reconcile'") == 1
    assert sorted(a["cron"]["scans"] + b["cron"]["scans"]) == ["reconcile"]
    code, again = finish(tick(env, "--deadline", "5s"))
    assert code == 0 and again["jobs"] == {} and again["failures"] == [] and again["cron"]["scans"] == []


def test_long_work_goes_on_across_ticks_in_slices_each_done_once(daemon_env):
    env = daemon_env
    [job] = env.enqueue("sliced", "t4", [{"n": 1, "units": 6, "unit_s": 0.2}], key=lambda i: "sliced:1")
    ticks = 0
    while env.job(job)["state"] != "completed":
        ticks += 1
        assert ticks <= 6, "the work never finished"
        code, summary = finish(tick(env, "--deadline", "900ms", "--queue", "t4"))
        assert code == 0, summary
    assert ticks >= 2                                  # it did not fit in one tick
    units = env.sql("select name, count(*) from {schema}.effects where name like 'unit:%' group by name order by name")
    assert units == [(f"unit:{u}", 1) for u in range(6)]   # each slice's work done once
    assert env.job(job)["attempt"] == 1                  # the pauses spent no attempt


def test_a_failing_scan_is_isolated_reported_and_runs_again_only_at_its_interval(pg_dsn, pg_schema):
    import xjobs
    from xjobs.config import Settings
    from xjobs.drivers.postgres import PostgresDriver
    from xjobs.tick import run_tick
    registry = xjobs.Registry()
    ran = []
    xjobs.job(queue="q", idempotency_key=lambda i: str(i), tenant="none", registry=registry, name="noop")(
        lambda ctx, i: None)

    def broken(ctx):
        ran.append(ctx.remaining())
        raise RuntimeError("the ledger is locked")
    xjobs.scan(name="broken", every="1h", fn=broken, registry=registry)
    xjobs.scan(name="fine", every="1h", fn=lambda ctx: ran.append("fine"), registry=registry)
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    driver.migrate()
    try:
        first = run_tick(driver=driver, registry=registry, settings=Settings(), deadline_s=5)
        second = run_tick(driver=driver, registry=registry, settings=Settings(), deadline_s=5)
    finally:
        driver.close()
    assert first.failed and first.jobs == {"scan:broken": {"retried": 1}, "scan:fine": {"completed": 1}}
    [failure] = first.failures
    assert failure["name"] == "scan:broken" and "the ledger is locked" in failure["error"]
    assert 0 < ran[0] <= 5 and ran[1] == "fine"          # the tick's budget reached the scan
    assert not second.failed and second.jobs == {} and len(ran) == 2


@pytest.mark.timing
def test_a_scan_is_told_when_the_ticks_deadline_passes_and_a_job_of_its_name_stays_apart(pg_dsn, pg_schema):
    import xjobs
    from xjobs.config import Settings
    from xjobs.drivers.postgres import PostgresDriver
    from xjobs.enqueue import enqueue_many
    from xjobs.tick import run_tick
    registry = xjobs.Registry()
    told = []

    def patient(ctx):
        told.append(ctx.signal.wait(10))           # returns once the deadline tells it
        raise RuntimeError("stopped at the deadline")
    xjobs.scan(name="sync", every="1h", fn=patient, registry=registry)
    xjobs.job(queue="q", idempotency_key=lambda i: str(i["n"]), tenant="none", registry=registry, name="sync",
              retry=xjobs.Retry(attempts=3, delay="1m"))(lambda ctx, i: 1 / 0)
    driver = PostgresDriver(pg_dsn, schema=pg_schema)
    driver.migrate()
    try:
        enqueue_many(registry.get("sync"), [{"n": 1}], driver=driver)
        summary = run_tick(driver=driver, registry=registry, settings=Settings(), deadline_s=1)
    finally:
        driver.close()
    assert told == [True] and summary.elapsed_s < 1 + 1
    assert summary.jobs["scan:sync"] == {"retried": 1}
    assert [f["name"] for f in summary.failures] == ["scan:sync"]   # the job ran out of the deadline's time


def test_a_tick_publishes_what_was_staged_and_prunes_what_outlived_its_retention(daemon_env):
    env = daemon_env
    from xjobs.drivers.base import NewJob
    staged = [NewJob(name="work_t1", queue="t1", payload=orjson.dumps({"n": n}), idempotency_key=f"t1:{n}")
              for n in range(3)]
    env.driver.outbox_stage(staged, None)
    for state, age in (("completed", "2 days"), ("dead", "20 days"), ("completed", "1 hour")):
        env.sql("insert into {schema}.jobs (name, queue, state, payload, idempotency_key, max_attempts, run_at, "
                "created_at, finished_at) values ('old', 'q', %s, '{}', %s, 1, now(), now(), now() - %s::interval)",
                state, f"{state}:{age}", age)
    code, summary = finish(tick(env, "--deadline", "10s"))
    assert code == 0, summary
    assert summary["outbox"]["published"] == 3 and summary["jobs"]["work_t1"] == {"completed": 3}
    assert summary["cron"]["leader"] is True and summary["upkeep"]["pruned"]["jobs"] == 2
    assert env.one("select count(*) from {schema}.outbox where published_at is null") == 0
    assert sorted(k for (k,) in env.sql("select idempotency_key from {schema}.jobs where name = 'old'")) == [
        "completed:1 hour"]                                    # inside its retention: kept
    assert env.one("select count(distinct job_id) from {schema}.effects where name = 'work_t1'") == 3


def test_a_tick_waiting_for_work_runs_a_job_enqueued_once_it_was_idle(daemon_env):
    from tests.waiting import wait_for
    env = daemon_env
    proc = tick(env, "--deadline", "20s", "--wait-for-work", "3s", "--queue", "t1")
    try:
        # the relay and the worker both listen: the pass is idle, waiting on their channels
        wait_for(lambda: len(env.backends("application_name = 'xjobsd-tick' and query ilike 'listen%%'")) >= 2,
                 15, "the tick listening for work")
        [job] = env.enqueue("work_t1", "t1", [{"n": 1}], key=lambda i: "t1:kicked")
        code, summary = finish(proc)
    finally:
        proc.kill()
    assert code == 0 and not summary["reached_deadline"], summary
    assert summary["jobs"]["work_t1"] == {"completed": 1} and env.job(job)["state"] == "completed"
