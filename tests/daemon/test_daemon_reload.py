"""``xjobsd reload`` as an operator runs it, against a real daemon serving a real app on disk.

The app is a package the test writes into the daemon's working directory and rewrites
between start and reload, so "new code" means a file that changed on disk. Each body
records its start in ``effects`` (job id, attempt, pid, and what it says about itself), so
which code ran, how often and when are questions for SQL, timed by the database's clock.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.daemon_fixtures import CLI, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "reloadapp.jobs"
# VERSION is the only thing a test changes, to a word of the same length, and the file keeps
# its modification time: a bytecode cache keyed on (mtime, size) would not see the change
SOURCE = '''\
"""A reloadable app for test_daemon_reload."""
import os
import time

import psycopg

from xjobs import job

VERSION = {version!r}
{extra}

def record(ctx, what):
    """One row per body start; answers how many starts this job had before this one."""
    schema = os.environ["XJOBS_SCHEMA"]
    with psycopg.connect(os.environ["XJOBS_DATABASE_URL"], autocommit=True) as db:
        return db.execute(
            f"insert into {{schema}}.effects (job_id, attempt, pid, name) values (%s, %s, %s, %s) "
            f"returning (select count(*) from {{schema}}.effects where job_id = %s)",
            (ctx.job_id, ctx.attempt, os.getpid(), what, ctx.job_id)).fetchone()[0]


@job(queue="rl", idempotency_key=lambda i: f"v:{{i['n']}}", tenant="none")
def versioned(ctx, input):
    record(ctx, VERSION)
    return VERSION


@job(queue="rl", idempotency_key=lambda i: f"h:{{i['n']}}", tenant="none")
def long_hold(ctx, input):
    """Holds its slot for a minute; a later delivery returns at once. With ``watch`` it
    stops when ctx.signal is set, without it it ignores the signal."""
    if record(ctx, "hold:" + VERSION):
        return
    if input["watch"]:
        if ctx.signal.wait(60):
            ctx.signal.raise_if_set()
    else:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            time.sleep(0.05)
'''


def write_app(tmp: Path, version: str, extra: str = "", keep_mtime: bool = True) -> None:
    package = tmp / "reloadapp"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    module = package / "jobs.py"
    before = module.stat() if module.exists() else None
    module.write_text(SOURCE.format(version=version, extra=extra))
    if before is not None and keep_mtime:
        os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))


def cli(daemon, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args) + ["--control", daemon.control], cwd=daemon.env.tmp,
                          env=daemon.env.process_env, capture_output=True, text=True, timeout=timeout)


def start(env, *args: str):
    daemon = env.start("--app", APP, "--queue", "rl=1x4", *args)
    daemon.ready()
    return daemon


def pids(daemon) -> dict[tuple[str, str | None, int], int]:
    return {(c["role"], c["queue"], c["index"]): c["pid"] for c in daemon.status()["children"]
            if not c["retiring"]}


def starts(env, job_id: int) -> list[tuple]:
    """(attempt, pid, name, at) of every start of a job, in order."""
    return env.sql("select attempt, pid, name, extract(epoch from at)::float8 from {schema}.effects "
                   "where job_id = %s order by at", job_id)


def enqueue(env, name: str, n: int, **payload) -> int:
    return env.enqueue_one(name, "rl", {"n": n, **payload}, key=f"{name[0]}:{n}")


def db_now(env) -> float:
    return env.one("select extract(epoch from clock_timestamp())::float8")


def history(env, job_id: int) -> list[str]:
    return [r[0] for r in env.sql("select outcome from {schema}.job_history where job_id = %s order by at",
                                  job_id)]


def test_a_reload_with_nothing_changed_replaces_nothing(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    daemon = start(env)
    before = pids(daemon)
    answer = cli(daemon, "reload", "--wait")
    assert answer.returncode == 0, answer
    assert answer.stdout.splitlines()[0] == "nothing changed: no child is replaced", answer.stdout
    assert pids(daemon) == before
    status = daemon.status()
    assert status["reload"]["last"]["replaced"] == [] and status["reload"]["state"] == "idle"
    assert "last reload: nothing changed, no child replaced" in cli(daemon, "status").stdout
    job_id = enqueue(env, "versioned", 1)
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "a job after the reload")
    assert pids(daemon) == before


def test_a_changed_module_is_run_by_the_new_workers(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    daemon = start(env)
    first = enqueue(env, "versioned", 1)
    wait_for(lambda: env.job(first)["state"] == "completed", 15, "a job on the first code")
    before = pids(daemon)
    write_app(env.tmp, "two")   # same size, same modification time
    answer = cli(daemon, "reload", "--wait")
    assert answer.returncode == 0, answer
    lines = answer.stdout.splitlines()
    assert lines[0] == "reloading: replacing scheduler, worker rl one group at a time", lines
    assert "  app code changed: reloadapp.jobs" in lines, lines
    after = pids(daemon)
    assert after[("worker", "rl", 1)] != before[("worker", "rl", 1)]
    assert after[("scheduler", None, 1)] != before[("scheduler", None, 1)]
    assert after[("outbox-relay", None, 1)] == before[("outbox-relay", None, 1)]   # runs no app code
    second = enqueue(env, "versioned", 2)
    wait_for(lambda: env.job(second)["state"] == "completed", 15, "a job on the new code")
    assert [s[2] for s in starts(env, first)] == ["one"]
    assert [s[2] for s in starts(env, second)] == ["two"]


def test_an_app_that_no_longer_imports_is_refused_and_the_old_workers_keep_serving(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    daemon = start(env)
    before = pids(daemon)
    write_app(env.tmp, "two", extra="def broken(:\n", keep_mtime=False)
    refused = cli(daemon, "reload")
    assert refused.returncode == 2, refused
    assert "X_APP_INVALID" in refused.stderr and "SyntaxError" in refused.stderr, refused.stderr
    assert "reloadapp.jobs" in refused.stderr and refused.stdout == ""
    status = daemon.status()
    assert status["reload"]["last"]["code"] == "X_APP_INVALID"
    assert "last reload refused: X_APP_INVALID" in cli(daemon, "status").stdout
    job_id = enqueue(env, "versioned", 1)
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "a job on the old code")
    assert [s[2] for s in starts(env, job_id)] == ["one"] and pids(daemon) == before



def test_a_configuration_the_app_cannot_serve_is_refused(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["rl=1x4"]\n')
    daemon = env.start("--app", APP, "--config", str(config))
    daemon.ready()
    before = pids(daemon)
    config.write_text('[xjobs]\nqueues = ["nope=1x1"]\n')
    refused = cli(daemon, "reload")
    assert refused.returncode == 2, refused
    assert "X_INVALID_OPTION" in refused.stderr and "nope" in refused.stderr, refused.stderr
    assert pids(daemon) == before


@pytest.mark.timing
def test_a_cooperative_job_is_signalled_by_a_reload_and_runs_again_at_once(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    daemon = start(env, "--drain-deadline", "20s")   # the lease is 30 s
    job_id = enqueue(env, "long_hold", 1, watch=True)
    wait_for(lambda: starts(env, job_id), 15, "the job to start")
    write_app(env.tmp, "two")
    asked = db_now(env)
    answer = cli(daemon, "reload", "--wait")
    assert answer.returncode == 0, answer
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the job to run again and complete")
    (a1, pid1, name1, _), (a2, pid2, name2, at2) = starts(env, job_id)
    assert (name1, name2) == ("hold:one", "hold:two") and pid1 != pid2
    assert a2 == a1 == 1                             # the interrupted attempt was given back
    assert history(env, job_id)[:1] == ["interrupted"]
    # signalled at once: back within seconds of the reload, neither the drain deadline nor a lease
    assert at2 - asked < 10, at2 - asked


@pytest.mark.timing
def test_an_uncooperative_job_is_handed_back_at_the_deadline_not_a_lease_later(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    config = env.tmp / "xjobs.toml"
    config.write_text('[xjobs]\nqueues = ["rl=1x4"]\ndrain_deadline = "3s"\n')
    daemon = env.start("--app", APP, "--config", str(config))   # the lease is 30 s
    daemon.ready()
    job_id = enqueue(env, "long_hold", 1, watch=False)
    wait_for(lambda: starts(env, job_id), 15, "the job to start")
    config.write_text('[xjobs]\nqueues = ["rl=1x3"]\ndrain_deadline = "3s"\n')   # the group is replaced
    answer = cli(daemon, "reload", "--wait")
    assert answer.returncode == 0, answer
    replaced = db_now(env)   # the old child is retired when its successor is ready, just before
    wait_for(lambda: len(starts(env, job_id)) == 2, 20, "the job to be handed back and start again")
    (a1, pid1, _, _), (a2, pid2, _, at2) = starts(env, job_id)
    assert pid1 != pid2 and a2 == a1 == 1        # handed back with its attempt given back
    assert history(env, job_id)[:1] == ["interrupted"]
    # it ignored its signal until the 3 s deadline, then came back at once: not a 30 s lease later
    assert 2.0 < at2 - replaced < 5.5, at2 - replaced
    wait_for(lambda: env.job(job_id)["state"] == "completed", 15, "the job to complete")


@pytest.mark.timing
def test_a_queue_keeps_a_claiming_worker_throughout_a_reload(daemon_env):
    env = daemon_env
    write_app(env.tmp, "one")
    daemon = start(env)
    stop = threading.Event()
    ids: list[int] = []
    # sampled as fast as the daemon answers: workers of rl still claiming. A gap would last a
    # child's start-up, which samples may miss; test_supervisor_reload checks every loop pass
    claiming: list[int] = []

    def feed() -> None:
        n = 0
        while not stop.is_set():
            ids.append(enqueue(env, "versioned", n))
            n += 1
            stop.wait(0.1)

    def watch() -> None:
        while not stop.is_set():
            claiming.append(sum(1 for c in daemon.status()["children"] if c["queue"] == "rl"
                                and c["state"] == "ready" and not c["retiring"]))
    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=watch, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(ids) >= 10, 10, "jobs before the reload")
        write_app(env.tmp, "two")
        answer = cli(daemon, "reload", "--wait")
        assert answer.returncode == 0, answer
        reloaded = len(ids)
        wait_for(lambda: len(ids) >= reloaded + 10, 10, "jobs after the reload")
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert len(claiming) > 20 and min(claiming) >= 1, claiming
    wait_for(lambda: env.one("select count(*) from {schema}.jobs where id = any(%s) and state = 'completed'",
                             ids) == len(ids), 30, "every job to complete")
    waits = env.sql("select j.id, extract(epoch from e.at - j.created_at)::float8, e.name from {schema}.jobs j "
                    "join {schema}.effects e on e.job_id = j.id where j.id = any(%s) order by j.id", ids)
    assert len(waits) == len(ids)   # each ran once
    assert max(w for _, w, _ in waits) < 2.0, sorted(waits, key=lambda w: -w[1])[:5]
    names = [name for _, _, name in waits]
    assert names[0] == "one" and names[-1] == "two"
