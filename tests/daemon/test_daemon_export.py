"""``export_rows()`` through the real daemon: 10,000 rows in pages of 1,000 to a local directory
are 10 parts, formula-guarded, each written after the checkpoints of the pages before it (the
streaming proof); a worker SIGKILLed mid-export, with a checkpoint of the killed run deleted
under it, resumes and leaves the same bytes as a clean run; an export of a tenanted source
(or of none) is refused the cross-tenant escape."""

from __future__ import annotations

import csv
import io
import os
import signal
import time
from pathlib import Path

import pytest

from tests.apps import export_app
from tests.apps.export_app import export_ddl
from tests.daemon_fixtures import wait_for
from xjobs.enqueue import enqueue_many

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

APP = "tests.apps.export_app"
ROWS = 10_000
LEADS = ["", "=", "+", "-", "@", "\t", "\r"]


def seed(env) -> None:
    env.sql(export_ddl(env.schema))
    env.sql("insert into {schema}.export_orders (id, org, name, amount) "
            "select i, 'acme', (array['', '=', '+', '-', '@', chr(9), chr(13)])[i %% 7 + 1] || 'name ' || i, "
            "case when i %% 3 = 0 then -i else i * 1.5 end from generate_series(0, %s) i", ROWS - 1)
    env.sql("insert into {schema}.export_orders (id, org, name, amount) values (%s, 'other', 'theirs', 1)", ROWS)


def parts(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def puts(env, job_id: int) -> list[tuple[int, str, int]]:
    return env.sql("select attempt, key, landed from {schema}.export_puts where job_id = %s order by at", job_id)


def start(env, tmp_path):
    daemon = env.start("--app", APP, "--queue", "exports=1x2", EXPORT_DIR=str(tmp_path),
                       XJOBS_LEASE="3s", XJOBS_HEARTBEAT="500ms", XJOBS_RESCUE="200ms")
    daemon.ready()
    return daemon


def enqueue(env, handle, **input) -> int:
    """Through the handle, as an app enqueues: its key and its tenant derived from the input."""
    return enqueue_many(handle, [input], driver=env.driver)[0].id


def test_an_export_through_the_daemon_streams_ten_parts_and_a_killed_run_leaves_the_same_bytes(daemon_env, tmp_path):
    env = daemon_env
    seed(env)
    daemon = start(env, tmp_path)
    began = time.monotonic()
    clean = enqueue(env, export_app.orders_export, org="acme", run="clean")
    wait_for(lambda: env.job(clean)["state"] == "completed", 60, "the clean export to complete")
    print(f"\nclean export of {ROWS} rows in pages of 1,000: {time.monotonic() - began:.2f}s (figure, not asserted)")
    written = parts(tmp_path / "clean")
    assert list(written) == [f"part-{i:05d}.csv" for i in range(10)]
    # streaming: the part of page k was written once the k pages before it had landed
    assert puts(env, clean) == [(1, f"part-{i:05d}.csv", i) for i in range(10)]
    records = [row for name in written for row in
               list(csv.reader(io.StringIO(written[name].decode(), newline="")))[1:]]
    assert len(records) == ROWS and all(r[1] == "acme" for r in records)    # the other org stays out
    assert all(data.startswith(b"id,org,name,amount\r\n") and data.endswith(b"\r\n") for data in written.values())
    by_id = {int(r[0]): r for r in records}
    assert by_id[1][2] == "'=name 1" and by_id[3][2] == "'-name 3" and by_id[5][2] == "'\tname 5"
    assert by_id[6][2] == "'\rname 6" and by_id[7][2] == "name 7"
    assert by_id[3][3] == "-3" and by_id[1][3] == "1.5"        # numbers untouched, a refund stays negative

    killed = enqueue(env, export_app.orders_export, org="acme", run="killed", stall_at=6)
    wait_for(lambda: env.one("select count(*) from {schema}.job_steps where job_id = %s", killed) == 6, 60,
             "the run to land six checkpoints and hold page 6")
    # the at-least-once window, to order: a recorded checkpoint is gone when the run dies
    env.sql("delete from {schema}.job_steps where job_id = %s and name = 'page:3'", killed)
    [worker] = [c["pid"] for c in daemon.children("exports") if c["pid"]]
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: env.job(killed)["state"] == "completed", 90, "the killed export to resume and complete")
    assert parts(tmp_path / "killed") == written                # byte for byte the clean run's parts
    assert puts(env, killed) == ([(1, f"part-{i:05d}.csv", i) for i in range(6)]
                                 + [(env.job(killed)["attempt"], "part-00003.csv", 5)]
                                 + [(env.job(killed)["attempt"], f"part-{i:05d}.csv", i) for i in range(6, 10)])
    print("\nkilled run writes (attempt, part, checkpoints landed):", puts(env, killed))
    assert not [p for p in (tmp_path / "killed").iterdir() if p.name.startswith(".")]   # no temporary left
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


def test_an_export_is_refused_the_cross_tenant_escape_tenanted_or_not(daemon_env, tmp_path):
    env = daemon_env
    seed(env)
    daemon = start(env, tmp_path)
    tenanted = enqueue(env, export_app.escaping_export, org="acme", run="escape")
    untenanted = enqueue(env, export_app.untenanted_escape, org="acme", run="escape-none")
    for job_id in (tenanted, untenanted):
        wait_for(lambda: env.job(job_id)["state"] == "dead", 30, "the escaping export to be refused")
        job = env.job(job_id)
        assert job["attempt"] == 1 and "X_TENANCY_CROSS_DENIED" in job["last_error"]
    assert env.one("select count(*) from {schema}.export_puts") == 0
    assert not (tmp_path / "escape").exists() and not (tmp_path / "escape-none").exists()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
