"""A backfill through the real daemon: 100,000 rows of an app table in batches of 1,000 while the
worker process running the pass is SIGKILLed at random points. Every row is handled at least
once, the ledger holds one completed run of 100,000 rows, the resumed attempts read no page a
checkpoint already covered (so they paid no pacer wait for one), a second ``backfill run`` is
refused as already run and ``--force`` runs a new pass; the wrong environment is refused with
no ledger row; a count that never converges records ``X_BACKFILL_STALLED``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import orjson
import pytest

from tests.apps.backfill_app import app_ddl
from tests.daemon_fixtures import ROOT, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon, pytest.mark.slow]

APP = "tests.apps.backfill_app"
ROWS, BATCH = 100_000, 1000
PAGES = ROWS // BATCH + 1        # the last full page says "more", an empty one ends the pass
KILLS = 3


def cli(env, *args, expect=0):
    proc = subprocess.run([sys.executable, "-m", "xjobs.cli", "backfill", *args, "--app", APP], cwd=ROOT,
                          env={**env.process_env, "XJOBS_ENVIRONMENT": "test"}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def ledger(env, name):
    return env.sql("select job_id, state, rows_swept, completed_at is not null, error from {schema}.backfills "
                   "where name = %s order by started_at, job_id", name)


def state_of(env, job_id):
    return env.job(job_id)["state"]


def test_a_backfill_survives_killed_workers_and_is_gated_by_its_ledger(daemon_env):
    env = daemon_env
    env.sql(app_ddl(env.schema, ROWS))
    # the environment from a --config file: the pass in a child reads it as the gate does
    config = env.tmp / "deploy.toml"
    config.write_text('[xjobs]\nenvironment = "test"\n')
    daemon = env.start("--app", APP, "--queue", "sweep=1x2", "--config", str(config))
    daemon.ready()
    listed = {row["name"]: row for row in orjson.loads(cli(env, "ls", "--json").stdout)["backfills"]}
    assert {name: row["status"] for name, row in listed.items()} == {
        "sweep": "pending", "sweep_prod": "excluded", "sweep_stalled": "pending"}

    [job_id] = [r["job_id"] for r in orjson.loads(cli(env, "run", "sweep", "--json").stdout)]
    rng = random.Random(os.environ.get("BACKFILL_KILL_SEED", "7"))
    marks = sorted(rng.sample(range(5_000, 90_000, 1000), KILLS))
    killed = 0
    for mark in marks:
        def reached():
            rows = ledger(env, "sweep")
            return state_of(env, job_id) == "completed" or (rows and rows[0][2] >= mark)
        wait_for(reached, 90, f"the pass to sweep {mark} rows")
        if state_of(env, job_id) != "running":
            break
        [worker] = daemon.children("sweep")
        os.kill(worker["pid"], signal.SIGKILL)
        killed += 1
        wait_for(lambda: [c for c in daemon.children("sweep") if c["pid"] != worker["pid"] and c["state"] == "ready"],
                 30, "the killed worker to be replaced")
    wait_for(lambda: state_of(env, job_id) in ("completed", "dead"), 120, "the pass to finish")
    assert env.job(job_id)["state"] == "completed", env.job(job_id)
    assert killed >= 1

    assert env.one("select count(*) from {schema}.sweep_rows where handled = 0") == 0
    assert ledger(env, "sweep") == [(job_id, "completed", ROWS, True, None)]   # one run, adopted
    assert env.one("select count(*) from {schema}.job_steps where job_id = %s", job_id) == PAGES
    reads = env.sql("select attempt, cursor from {schema}.sweep_reads where name = 'sweep'")
    attempts = env.job(job_id)["attempt"]
    # each read is one batch body, after exactly one pacer wait: a replayed batch read nothing,
    # so the resumed attempts paid a wait only for the page each kill cut short
    waits, again = len(reads), len(reads) - len({cursor for _, cursor in reads})
    print(f"\nbackfill of {ROWS} rows in {PAGES} batches, {killed} workers SIGKILLed: "
          f"{waits} pacer waits over {attempts} attempts ({again} pages read twice)")
    assert waits <= PAGES + killed and again <= killed
    shown = orjson.loads(subprocess.run([sys.executable, "-m", "xjobs.cli", "jobs", "show", str(job_id), "--json"],
                                        cwd=ROOT, env=env.process_env, capture_output=True, timeout=60).stdout)
    assert (shown["backfill"]["rows"], shown["backfill"]["state"]) == (ROWS, "completed")

    refused = cli(env, "run", "sweep", expect=2)
    assert "X_BACKFILL_ALREADY_RAN" in refused.stderr
    [forced] = orjson.loads(cli(env, "run", "sweep", "--force", "--json").stdout)
    assert forced["job_id"] != job_id and forced["refused"] is None
    wait_for(lambda: state_of(env, forced["job_id"]) == "completed", 120, "the forced pass")
    assert [(r[0], r[1], r[2]) for r in ledger(env, "sweep")] == [
        (job_id, "completed", ROWS), (forced["job_id"], "completed", ROWS)]

    # the wrong environment: the gate refuses it, and so does the pass itself, before the ledger
    assert "X_BACKFILL_ENVIRONMENT" in cli(env, "run", "sweep_prod", expect=2).stderr
    [prod] = env.enqueue("sweep_prod", "sweep", [{}], key=lambda i: "backfill:sweep_prod")
    wait_for(lambda: state_of(env, prod) == "dead", 60, "the wrong-environment pass to be refused")
    assert "X_BACKFILL_ENVIRONMENT" in env.job(prod)["last_error"]
    assert ledger(env, "sweep_prod") == []
    assert env.one("select count(*) from {schema}.sweep_reads where name = 'sweep_prod'") == 0

    [stalled] = orjson.loads(cli(env, "run", "sweep_stalled", "--json").stdout)
    wait_for(lambda: state_of(env, stalled["job_id"]) == "dead", 60, "the stalled pass")
    assert "X_BACKFILL_STALLED" in env.job(stalled["job_id"])["last_error"]
    [(_, state, rows, finished, error)] = ledger(env, "sweep_stalled")
    assert (state, rows, finished) == ("failed", 25, True) and "BackfillStalled" in error

    # --all: the stalled one is pending again and is refused by nothing but its own pass
    final = {row["name"]: row["status"] for row in orjson.loads(cli(env, "ls", "--json").stdout)["backfills"]}
    assert final == {"sweep": "completed", "sweep_prod": "excluded", "sweep_stalled": "pending"}
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(60) == 0
