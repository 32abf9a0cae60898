"""Running ``xjobsd`` as a user runs it, for the benchmarks: a fresh schema, a subprocess with
the bench app (``noop_app.py``), a drain timed on the database's own clock, and the server's
work during it (statements, WAL bytes).

A drain is timed from the first job's start to the last job's finish (``started_at`` and
``finished_at``, both taken by the server), so the daemon's start-up is not counted and the
reading needs no polling precision; the poll that waits for the end asks two ``exists``
questions of the partial indexes, so the watcher costs the server next to nothing.

Also the parts every benchmark shares: readiness over the daemon's control socket, the title
and memory (VmRSS, PSS, USS) of each of its processes, the percentile the tables print, and the raw
LISTEN/NOTIFY session the latency baselines time against (``raw_listener``).
"""

from __future__ import annotations

import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg

from xjobs.drivers.postgres import PostgresDriver
from xjobs.enqueue import enqueue_many
from xjobs.control_client import ControlUnavailable, request

BENCH = Path(__file__).resolve().parent
XJOBSD = str(Path(sys.executable).with_name("xjobsd"))


def fresh_schema(dsn: str) -> str:
    schema = f"xjobs_bench_{uuid.uuid4().hex[:8]}"
    PostgresDriver(dsn, schema=schema).migrate()
    return schema


def drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"drop schema {schema} cascade")


@contextmanager
def raw_listener(dsn: str, name: str, table: str,
                 on_notes: Callable[[psycopg.Connection[Any], str], None]) -> Iterator[str]:
    """A raw baseline's listening session: a schema of its own holding ``table`` (its columns,
    as ``create table`` takes them, for a table ``q``), and a thread LISTENing on a channel
    named like the schema that calls ``on_notes(conn, schema)`` on its own connection each
    time notifications arrive. Yields the schema (also the channel); dropped on the way out."""
    schema = f"{name}_{os.getpid()}"
    stop, listening = threading.Event(), threading.Event()
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute(f"create schema {schema}")
        setup.execute(f"create table {schema}.q ({table})")

    def listen() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"listen {schema}")
            listening.set()
            while not stop.is_set():
                select.select([conn.fileno()], [], [], 0.5)
                if list(conn.notifies(timeout=0)):   # drained first: the generator holds the connection
                    on_notes(conn, schema)
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        listening.wait(10)
        yield schema
    finally:
        stop.set()
        listener.join(10)
        drop_schema(dsn, schema)


def _one(conn: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = conn.execute(query, params or None).fetchone()
    assert row is not None
    return row[0]


@dataclass
class ServerWork:
    """What the whole server did between two readings: WAL bytes and statements. Statements are
    ``pg_stat_statements`` calls when the extension is loaded, else committed transactions
    (every statement of an autocommit session is one), both server-wide."""

    wal: str
    statements: int
    source: str

    @classmethod
    def read(cls, dsn: str) -> "ServerWork":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select pg_stat_clear_snapshot()")
            wal = _one(conn, "select pg_current_wal_lsn()::text")
            try:
                calls = _one(conn, "select coalesce(sum(calls), 0)::bigint from pg_stat_statements")
                return cls(wal, int(calls), "pg_stat_statements")
            except psycopg.Error:
                pass
        with psycopg.connect(dsn, autocommit=True) as conn:
            # the statistics are flushed at most every 10 ms and at a session's end: wait that out
            time.sleep(0.05)
            xacts = _one(conn, "select sum(xact_commit + xact_rollback)::bigint from pg_stat_database")
            return cls(wal, int(xacts), "transactions")

    def since(self, dsn: str, before: "ServerWork") -> tuple[float, int]:
        """(WAL bytes, statements) from ``before`` to this reading."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            wal = _one(conn, "select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", self.wal, before.wal)
        return float(wal), self.statements - before.statements


@dataclass
class Drain:
    jobs: int
    seconds: float
    wal_per_job: float
    statements_per_job: float
    source: str   # where the statements were counted (``ServerWork.source``)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


class Daemon:
    """``xjobsd run --app noop_app`` on ``schema``, as a subprocess."""

    def __init__(self, dsn: str, schema: str, queues: list[str], *extra: str) -> None:
        self.dsn, self.schema = dsn, schema
        self._tmp = tempfile.TemporaryDirectory(prefix="xjobs-bench-")
        self.control = os.path.join(self._tmp.name, "xjobsd.sock")
        env = {**os.environ, "XJOBS_DATABASE_URL": dsn, "XJOBS_SCHEMA": schema,
               "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
        argv = [XJOBSD, "run", "--app", "noop_app", "--control", self.control, "--metrics", "off",
                *[arg for q in queues for arg in ("--queue", q)], *extra]
        # the log goes to a file: a pipe nobody reads while the daemon runs fills and blocks it
        self.log = Path(self._tmp.name) / "xjobsd.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, env=env, cwd=self._tmp.name, stdout=subprocess.DEVNULL,
                                         stderr=log, start_new_session=True)

    def pids(self) -> dict[str, int]:
        """Every process of this daemon by its title: the supervisor and its children."""
        return {title: pid for pid in [self.proc.pid, *_children(self.proc.pid)]
                if (title := proc_title(pid)) is not None}

    def rss_mib(self) -> dict[str, float]:
        """Resident memory of every process of this daemon, by title."""
        return process_rss(self.proc.pid)

    def memory_mib(self) -> dict[str, "Memory"]:
        """VmRSS, PSS and USS of every process of this daemon, by title."""
        return {title: mem for pid in [self.proc.pid, *_children(self.proc.pid)]
                if (title := proc_title(pid)) is not None and (mem := Memory.of(pid)) is not None}

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Every child of THIS daemon ready, asked over its control socket (the database would
        count other daemons' sessions too)."""
        wait_control_ready(self.control, self.proc, timeout, log=self.log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._tmp.cleanup()

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def wait_control_ready(control: str, proc: subprocess.Popen, timeout: float = 30.0,
                       log: Path | None = None) -> dict:
    """Poll the daemon ``proc`` at its control socket ``control`` until it runs and every child
    is ready, then give the children 0.3 s for their first (empty) claim and listen; the last
    status. Raises with the tail of the daemon's ``log`` if it exited, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = log.read_bytes().decode(errors="replace")[-2000:] if log is not None else ""
            raise RuntimeError(f"xjobsd exited with {proc.returncode}: {err}")
        try:
            status = request(control, "status")
        except ControlUnavailable:
            status = {}
        if status.get("state") == "running" and all(c.get("state") == "ready" for c in status.get("children", [])):
            time.sleep(0.3)
            return status
        time.sleep(0.05)
    raise RuntimeError(f"xjobsd did not become ready within {timeout:g} s")


def proc_title(pid: int) -> str | None:
    """The process title of ``pid`` (its argv[0], which ``xjobsd`` sets per process), or None
    when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return None


def process_rss(root: int) -> dict[str, float]:
    """RSS (MiB) of ``root`` and its descendants, by process title."""
    out = {}
    for pid in [root, *_children(root)]:
        title, rss = proc_title(pid), rss_mib(pid)
        if title is not None and rss is not None:
            out[title] = rss
    return out


def percentile(samples: list[float], q: float) -> float:
    """The median for ``q`` = 0.5, else the sample at rank ``int(n * q)`` of ``n`` sorted (the
    first when that rank is 0): the p99 of 200 samples is the 198th."""
    ordered = sorted(samples)
    if q == 0.5:
        return statistics.median(ordered)
    return ordered[max(0, int(len(ordered) * q) - 1)]


@dataclass(frozen=True)
class Memory:
    """One process's memory (MiB), from ``/proc/PID/smaps_rollup``. ``rss`` counts every page
    the process maps, shared or not: a forked child's copy-on-write pages count whole in each
    child and again in its parent. ``pss`` divides each page by the processes that map it, so
    the PSS of a daemon's processes adds up to what the daemon costs the machine; ``uss`` is
    the pages only this process maps, what its exit would give back."""

    rss: float
    pss: float
    uss: float

    @classmethod
    def of(cls, pid: int) -> "Memory | None":
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            return None
        kib = {key: int(rest.split()[0]) for key, _, rest in
               (line.partition(":") for line in text.splitlines()[1:]) if rest.strip()}
        return cls(kib["Rss"] / 1024.0, kib["Pss"] / 1024.0,
                   (kib["Private_Clean"] + kib["Private_Dirty"]) / 1024.0)


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _children(pid: int) -> Iterator[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return
    for kid in kids:
        yield int(kid)
        yield from _children(int(kid))


def enqueue_noops(dsn: str, schema: str, jobs: int) -> None:
    """Enqueue ``jobs`` no-op jobs (inputs 0..jobs-1) in batches of 10,000, then ``analyze`` the
    table, as autovacuum would have before a real drain (the plans depend on it)."""
    import noop_app   # the bench app, on sys.path beside this file
    driver = PostgresDriver(dsn, schema=schema)
    try:
        for start in range(0, jobs, 10_000):
            enqueue_many(noop_app.noop, list(range(start, min(jobs, start + 10_000))), driver=driver)
    finally:
        driver.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"analyze {schema}.jobs")


def drain_seconds(dsn: str, schema: str, jobs: int, after_id: int = 0) -> float:
    """Seconds from the first start to the last finish of the jobs with an id above
    ``after_id``, on the server's clock; asserts that ``jobs`` of them completed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"select min(started_at), max(finished_at), count(*) filter (where state = 'completed') "
            f"from {schema}.jobs where id > %s", (after_id,)).fetchone()
    assert row is not None
    began, ended, done = row
    assert done == jobs, (done, jobs)
    return float((ended - began).total_seconds())


def wait_drained(dsn: str, schema: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            busy = _one(conn, f"select exists(select 1 from {schema}.jobs where state = 'ready') "
                              f"or exists(select 1 from {schema}.jobs where state = 'running')")
            if not busy:
                return
            time.sleep(0.1)
    raise RuntimeError("the drain did not finish")


def daemon_drain(dsn: str, jobs: int, queues: list[str], *, schema: str | None = None) -> Drain:
    """Enqueue ``jobs`` no-op jobs, start ``xjobsd`` on them and time the drain.

    With ``schema`` the jobs go into that (prepared) schema, which is left in place."""
    own = schema is None
    schema = schema or fresh_schema(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            first = _one(conn, f"select coalesce(max(id), 0) from {schema}.jobs")
        enqueue_noops(dsn, schema, jobs)
        before = ServerWork.read(dsn)
        with Daemon(dsn, schema, queues):
            wait_drained(dsn, schema)
        # read once the daemon's sessions ended: a busy session publishes its counters at most
        # once a second, and at its end
        after = ServerWork.read(dsn)
        seconds = drain_seconds(dsn, schema, jobs, after_id=first)
        wal, statements = after.since(dsn, before)
        return Drain(jobs, seconds, wal / jobs, statements / jobs, after.source)
    finally:
        if own:
            drop_schema(dsn, schema)
