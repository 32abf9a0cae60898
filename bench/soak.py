"""Soak: the daemon at a steady enqueue rate while a random worker child is SIGKILLed every
few seconds. Prints jobs enqueued, completed, dead (with their verdicts grouped), lost (must
be 0), run twice, the backlog, child restarts and the p50/p99/p99.9 enqueue-to-start
latency, from SQL. Exits 1 when a job was lost or the daemon did not exit cleanly.

    python bench/soak.py [--minutes 60 | --duration 60] [--rate 200] [--kill-every 3] [--dsn ...]

Memory: the resident set of every process of the daemon is sampled each minute (and at the
end of the enqueueing). A process is followed by its title (``xjobsd: worker queue=soak_a
#1``), so a killed child's successor continues its line; the first sample after
``--warmup`` seconds is the baseline, and the run FAILS when any title's last sample is more
than 10% above its baseline (a leak), as it fails on a lost job.

``--kill-every 0`` is the baseline: the same load with no kills, to tell what the kills cost
from what the load costs.

Every job body records its start in an ``effects`` table before doing anything else, so
"run twice" counts bodies that started twice (the at-least-once cost of each kill) and the
latency is the first start (the body's own clock) minus the job's ``created_at`` (the
server's): run it on the database's machine, or with clocks in sync.

A job is LOST when it is still ready, running or suspended once the queue has had
``--settle`` seconds after the enqueueing stopped, or when it completed without its body
ever having started. A dead job is not lost (it is in the dead letters, with its reason),
but a crash counts as an attempt, so a job killed on each of its attempts dies: the table
says how many did, and why.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# the repository (for tests.apps) and bench/ (for daemon.py), from wherever this is started
sys.path[:0] = [str(ROOT), str(BENCH)]

from daemon import process_rss, wait_control_ready  # noqa: E402
from tests.apps.daemon_app import effects_ddl  # noqa: E402
from xjobs.drivers.base import NewJob  # noqa: E402
from xjobs.drivers.postgres import PostgresDriver  # noqa: E402
from xjobs.control_client import ControlUnavailable, request  # noqa: E402

CLI = [sys.executable, "-c", "import sys; from xjobs.cli import main; sys.exit(main())"]


LIVE = "('ready', 'running', 'suspended')"
# a child's identity (role:host:pid:hex) differs per process; verdicts group without it
IDENTITY = r"[a-z-]+:[^:\s,]+:[0-9]+:[0-9a-f]{12}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("XJOBS_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of enqueueing (60)")
    parser.add_argument("--minutes", type=float, help="minutes of enqueueing (overrides --duration)")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="seconds before the memory baseline is taken (60)")
    parser.add_argument("--rate", type=float, default=200.0, help="jobs per second, split over two queues (200)")
    parser.add_argument("--kill-every", type=float, default=3.0, help="mean seconds between child kills (3; 0: no kills)")
    parser.add_argument("--job-ms", type=float, default=20.0, help="mean body duration in ms (20)")
    parser.add_argument("--queues", default="soak_a=2x16,soak_b=1x16")
    parser.add_argument("--settle", type=float, default=120.0,
                        help="seconds the queue gets to finish after the enqueueing stops (120)")
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    args = parser.parse_args()
    if args.minutes is not None:
        args.duration = args.minutes * 60.0

    schema = f"soak_{uuid.uuid4().hex[:8]}"
    driver = PostgresDriver(args.dsn, schema=schema, pool_size=2, application_name="xjobs-soak")
    driver.migrate()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(effects_ddl(schema))
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / schema
    workdir.mkdir(parents=True)
    control = str(workdir / "control.sock")
    env = {**os.environ, "XJOBS_DATABASE_URL": args.dsn, "XJOBS_SCHEMA": schema,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = CLI + ["run", "--app", "tests.apps.daemon_app", "--control", control, "--metrics", "off",
                  "--log-level", "WARNING"] + [a for q in args.queues.split(",") for a in ("--queue", q)]
    log = open(workdir / "daemon.log", "wb")
    proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    kills = restarts = 0
    memory: list[dict[str, float]] = []   # RSS in MiB per process title, one dict per sample
    peak_depth = peak_age_ms = end_depth = 0.0
    try:
        wait_control_ready(control, proc, log=workdir / "daemon.log")
        rng = random.Random(7)
        n = 0
        started = time.monotonic()
        stop_killing = threading.Event()
        killed: list[int] = []

        def killer() -> None:
            # its own clock, jittered, so kills land anywhere in a job's life, not just after an enqueue
            while not stop_killing.wait(args.kill_every * rng.uniform(0.5, 1.5)):
                try:
                    children = request(control, "status")["children"]
                except ControlUnavailable:
                    continue
                workers = [c for c in children if c["role"] == "worker" and c["pid"] and c["state"] == "ready"]
                if workers:
                    os.kill(rng.choice(workers)["pid"], signal.SIGKILL)
                    killed.append(1)
        thread = threading.Thread(target=killer, daemon=True)
        if args.kill_every > 0:
            thread.start()
        tick, next_sample = 0.1, started
        next_rss = started + min(args.warmup, args.duration)
        while (now := time.monotonic()) - started < args.duration:
            due = int((now - started) * args.rate) - n
            if due > 0:
                batch = []
                for _ in range(due):
                    name, queue = ("soak_a", "soak_a") if n % 3 else ("soak_b", "soak_b")
                    batch.append(NewJob(name=name, queue=queue, idempotency_key=f"{queue[-1]}:{n}",
                                        payload=orjson.dumps({"n": n, "ms": rng.expovariate(1 / args.job_ms)})))
                    n += 1
                driver.job_enqueue(batch)
            if now >= next_sample:   # the backlog once a second: does it stay flat or grow?
                next_sample = now + 1.0
                summary = driver.queue_summary().values()
                end_depth = sum(q.depth for q in summary)
                peak_depth = max(peak_depth, end_depth)
                peak_age_ms = max([peak_age_ms, *(q.oldest_ready_ms for q in summary)])
            if now >= next_rss:
                next_rss = now + 60.0
                memory.append(process_rss(proc.pid))
            time.sleep(max(0.0, tick - (time.monotonic() - now)))
        memory.append(process_rss(proc.pid))
        enqueue_s = time.monotonic() - started
        stop_killing.set()
        if thread.is_alive():
            thread.join()
        kills = len(killed)

        # let everything finish: a killed child's jobs come back once its sessions are gone
        end = time.monotonic() + args.settle
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            while time.monotonic() < end:
                left = conn.execute(f"select count(*) from {schema}.jobs where state in {LIVE}").fetchone()
                if left is not None and left[0] == 0:
                    break
                time.sleep(0.2)
        settle_s = time.monotonic() - started - enqueue_s
        status = request(control, "status")
        restarts = sum(c["restarts"] for c in status["children"])
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()

    with psycopg.connect(args.dsn, autocommit=True) as conn:
        def q(sql: str, *p: object) -> tuple[Any, ...]:
            row = conn.execute(sql.replace("{s}", schema), p or None).fetchone()
            assert row is not None
            return row

        enqueued = q("select count(*) from {s}.jobs")[0]
        completed = q("select count(*) from {s}.jobs where state = 'completed'")[0]
        dead = q("select count(*) from {s}.jobs where state = 'dead'")[0]
        live = q(f"select count(*) from {{s}}.jobs where state in {LIVE}")[0]
        twice = q("select count(*) from (select job_id from {s}.effects group by job_id having count(*) > 1) t")[0]
        never = q("select count(*) from {s}.jobs j where not exists (select 1 from {s}.effects e where e.job_id = j.id)")[0]
        hollow = q("select count(*) from {s}.jobs j where state = 'completed' "
                   "and not exists (select 1 from {s}.effects e where e.job_id = j.id)")[0]
        p50, p99, p999, pmax = q("""select percentile_cont(0.5) within group (order by lat),
                                          percentile_cont(0.99) within group (order by lat),
                                          percentile_cont(0.999) within group (order by lat), max(lat)
                                   from (select extract(epoch from min(e.at) - j.created_at) * 1000 as lat
                                         from {s}.jobs j join {s}.effects e on e.job_id = j.id
                                         group by j.id, j.created_at) t""")
        verdicts = conn.execute(f"select left(regexp_replace(last_error, %s, '<worker>', 'g'), 160), count(*) "
                                f"from {schema}.jobs where state = 'dead' group by 1 order by 2 desc, 1 limit 10",
                                (IDENTITY,)).fetchall()
        stuck = conn.execute(f"select id, state, attempt, left(coalesce(last_error, ''), 120) from {schema}.jobs "
                             f"where state in {LIVE} order by id limit 10").fetchall()
        if not args.keep:
            conn.execute(f"drop schema {schema} cascade")
    driver.close()
    lost = live + hollow
    grown = {title: (first, memory[-1][title]) for title, first in memory[0].items()
             if title in memory[-1] and memory[-1][title] > first * 1.10} if len(memory) > 1 else {}

    ms = lambda v: "-" if v is None else f"{v:.1f} ms"  # noqa: E731
    rows = [("duration (enqueueing)", f"{enqueue_s:.1f} s"), ("rate", f"{args.rate:g} jobs/s"),
            ("worker children killed", kills), ("child restarts", restarts),
            ("jobs enqueued", enqueued), ("jobs completed", completed), ("jobs dead", dead),
            ("lost (live after settling, or completed unstarted)", lost), ("never started", never),
            ("run twice (at-least-once)", twice),
            ("ready backlog: peak / last (sampled each second)", f"{peak_depth:.0f} / {end_depth:.0f}"),
            ("oldest ready job, peak", ms(peak_age_ms)),
            ("enqueue-to-start p50", ms(p50)), ("enqueue-to-start p99", ms(p99)),
            ("enqueue-to-start p99.9", ms(p999)), ("enqueue-to-start max", ms(pmax)),
            ("settled after enqueueing stopped", f"{settle_s:.1f} s" + ("" if live == 0 else " (did not settle)")),
            ("daemon exit code", code)]
    width = max(len(k) for k, _ in rows)
    kill = f"kill every {args.kill_every:g} s" if args.kill_every > 0 else "no kills (baseline)"
    print(f"\nxjobsd soak ({args.queues}, {args.job_ms:g} ms mean body, {kill})")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
    if verdicts:
        print("  dead jobs by verdict:")
        for verdict, count in verdicts:
            print(f"    {count:>6}  {verdict}")
    if memory:
        print(f"  RSS per process, MiB ({len(memory)} samples: after warm-up, each minute, at the end):")
        for title in sorted(memory[0]):
            line = " ".join(f"{sample[title]:.1f}" if title in sample else "-" for sample in memory)
            print(f"    {title:<36} {line}{'  GREW > 10%' if title in grown else ''}")
    if stuck:
        print("  lost jobs (first 10):")
        for job_id, state, attempt, error in stuck:
            print(f"    #{job_id} {state} attempt {attempt} {error}")
    return 0 if lost == 0 and code == 0 and not grown else 1


if __name__ == "__main__":
    sys.exit(main())
