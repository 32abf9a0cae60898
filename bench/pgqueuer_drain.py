"""PgQueuer, the fastest Python peer, drained as its users run it: its CLI's ``install`` for a
schema of its own, then its ``run`` in ``PGQUEUER_PROCESSES`` processes with ``--batch-size
500`` and ``--mode drain`` (each exits once the queue is empty), on an ``async def`` no-op
entrypoint over asyncpg (its default driver). The CLI is PgQueuer's own (``pgq``), started
through ``cli()`` below for one repair.

Timed on the server's clock like the xjobsd rows: from the first job picked to the last one
logged as successful, read from PgQueuer's own ``pgqueuer_log`` (PgQueuer deletes a finished
job from its queue table and logs it there). ``main`` is the factory ``pgq run`` imports.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import psycopg

from daemon import ServerWork

PGQUEUER_PROCESSES = 2
PGQUEUER_BATCH = 500
HERE = Path(__file__).resolve().parent


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[Any]:
    """``pgq run pgqueuer_drain:main``: one asyncpg connection, the ``noop`` entrypoint."""
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver

    connection = await asyncpg.connect(os.environ["PGDSN"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Any) -> None:  # noqa: ARG001
        return None

    try:
        yield pgq
    finally:
        await connection.close()


def cli() -> None:
    """PgQueuer's own CLI (what ``pgq`` runs), with one repair: its ``--log-level`` option
    hands the level on as a string where the logger setup wants the enum (PgQueuer 1.6 under
    typer 0.29), which fails ``pgq run`` before it starts."""
    from pgqueuer.adapters.cli import cli as pgq
    from pgqueuer.core import logconfig

    setup = logconfig.setup_fancy_logger
    logconfig.setup_fancy_logger = lambda level: setup(logconfig.LogLevel(str(getattr(level, "value", level))))
    pgq.app(prog_name="pgq")


def pgqueuer_missing() -> str | None:
    """Why the PgQueuer row cannot run here, or None when it can."""
    for module in ("pgqueuer", "asyncpg"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install 'xjobsd[bench]')"
    return None


def pgqueuer_drain(dsn: str, jobs: int) -> tuple[float, float]:
    """(jobs/s, WAL bytes per job) of PgQueuer draining ``jobs`` no-op jobs."""
    schema = f"pgq_bench_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PGDSN": dsn, "PGQUEUER_SCHEMA": schema,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    cli = [sys.executable, str(HERE / "pgqueuer_drain.py")]
    subprocess.run([*cli, "install"], env=env, check=True, capture_output=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"insert into {schema}.pgqueuer (priority, status, entrypoint, payload) "
                         f"select 0, 'queued', 'noop', null from generate_series(1, %s)", (jobs,))
            conn.execute(f"analyze {schema}.pgqueuer")
        before = ServerWork.read(dsn)
        runs = [subprocess.Popen([*cli, "run", "pgqueuer_drain:main", "--mode", "drain",
                                  "--batch-size", str(PGQUEUER_BATCH)],
                                 env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for _ in range(PGQUEUER_PROCESSES)]
        for run in runs:
            _, err = run.communicate(timeout=600)
            if run.returncode != 0:
                raise RuntimeError(f"pgq run exited with {run.returncode}: {err.decode()[-2000:]}")
        wal, _ = ServerWork.read(dsn).since(dsn, before)
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                f"select min(created) filter (where status = 'picked'), "
                f"max(created) filter (where status = 'successful'), "
                f"count(*) filter (where status = 'successful'), "
                f"(select count(*) from {schema}.pgqueuer) from {schema}.pgqueuer_log").fetchone()
        assert row is not None
        began, ended, done, left = row
        assert (done, left) == (jobs, 0), (done, left, jobs)
        return jobs / float((ended - began).total_seconds()), wal / jobs
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")


if __name__ == "__main__":
    cli()
