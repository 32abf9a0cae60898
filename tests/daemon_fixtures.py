"""Run ``xjobsd`` as a user does: a subprocess, real signals, its real socket and HTTP port.

``daemon_env`` gives each test its own Postgres schema (migrated, with the test app's
``effects`` table) and a factory for daemons bound to it. Every wait polls a condition with
a deadline; nothing sleeps to synchronise. Whatever a test leaves running is killed at
teardown: the supervisor first, then any child that is somehow still there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson
import psycopg
import pytest

from tests.apps.daemon_app import effects_ddl
from tests.fixtures import drop_schema, new_schema_name
from tests.waiting import wait_for
from xjobs.drivers.base import NewJob
from xjobs.drivers.postgres import PostgresDriver
from xjobs.control_client import ControlUnavailable, request

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.apps.daemon_app"
CLI = [sys.executable, "-c", "import sys; from xjobs.cli import main; sys.exit(main())"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class Daemon:
    def __init__(self, env: "DaemonEnv", args: list[str], extra_env: dict[str, str],
                 new_session: bool = False) -> None:
        self.env = env
        self.control = str(env.tmp / f"control-{len(env.daemons)}.sock")
        self.port = free_port()
        self.log_path = env.tmp / f"daemon-{len(env.daemons)}.log"
        argv = CLI + ["run", "--app", APP, "--control", self.control,
                      "--metrics", f"127.0.0.1:{self.port}", "--stats-interval", "250ms", *args]
        self.log = open(self.log_path, "wb")
        # new_session: the daemon leads its own process group, as under coreutils ``timeout``
        # or a terminal, so a test can signal the whole group with os.killpg(daemon.pid, ...)
        self.proc = subprocess.Popen(argv, cwd=env.tmp, env={**env.process_env, **extra_env},
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=new_session)
        self.pid = self.proc.pid
        self.child_pids: set[int] = set()

    # -- talking to it -----------------------------------------------------------------------------

    def status(self) -> dict:
        answer = request(self.control, "status", timeout_s=5.0)
        self.child_pids.update(c["pid"] for c in answer.get("children", ()) if c.get("pid"))
        return answer

    def try_status(self) -> dict | None:
        try:
            return self.status()
        except (ControlUnavailable, OSError):
            return None

    def ready(self, timeout: float = 20.0) -> dict:
        def check() -> dict | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"xjobsd exited with {self.proc.returncode}:\n{self.output()}")
            answer = self.try_status()
            if answer and answer["state"] == "running" and answer["children"] and all(
                    c["state"] == "ready" for c in answer["children"]):
                return answer
            return None
        return wait_for(check, timeout, "every child to be ready")

    def children(self, queue: str | None = None, role: str = "worker") -> list[dict]:
        """The children of one role (workers by default), of one queue if given."""
        return [c for c in self.status()["children"]
                if c["role"] == role and (queue is None or c["queue"] == queue)]

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> dict[str, Any]:
        """name -> family, parsed with prometheus-client's own parser."""
        from prometheus_client.parser import text_string_to_metric_families
        code, text = self.http("/metrics")
        assert code == 200, text
        return {family.name: family for family in text_string_to_metric_families(text)}

    def sample(self, family: str, sample_name: str | None = None, **labels: str) -> float:
        total = 0.0
        families = self.metrics()
        if family not in families:   # not exported yet (a gauge appears with its first stats)
            return total
        for s in families[family].samples:
            if sample_name is not None and s.name != sample_name:
                continue
            if all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
        return total

    # -- stopping it -------------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"xjobsd still running after {timeout}s:\n{self.output()}") from None

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill_everything(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pid in self.child_pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.log.close()


class DaemonEnv:
    def __init__(self, dsn: str, schema: str, tmp: Path) -> None:
        self.dsn = dsn
        self.schema = schema
        self.tmp = tmp
        self.daemons: list[Daemon] = []
        self.driver = PostgresDriver(dsn, schema=schema, pool_size=2, application_name="xjobs-tests")
        self.process_env = {**os.environ, "XJOBS_DATABASE_URL": dsn, "XJOBS_SCHEMA": schema,
                            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                            "XDG_RUNTIME_DIR": str(tmp)}
        self.process_env.pop("NOTIFY_SOCKET", None)

    def start(self, *args: str, new_session: bool = False, **extra_env: str) -> Daemon:
        daemon = Daemon(self, list(args), extra_env, new_session)
        self.daemons.append(daemon)
        return daemon

    def enqueue(self, name: str, queue: str, inputs: list[dict], key: Callable[[dict], str]) -> list[int]:
        jobs = [NewJob(name=name, queue=queue, payload=orjson.dumps(i), idempotency_key=key(i))
                for i in inputs]
        ids: list[int] = []
        for start in range(0, len(jobs), 1000):
            ids.extend(e.id for e in self.driver.job_enqueue(jobs[start:start + 1000]))
        return ids

    def sql(self, query: str, *params: Any) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query.replace("{schema}", self.schema), params or None)
            return cur.fetchall() if cur.description is not None else []

    def one(self, query: str, *params: Any) -> Any:
        return self.sql(query, *params)[0][0]

    def enqueue_one(self, name: str, queue: str, payload: dict, key: str, max_attempts: int = 5) -> int:
        job = NewJob(name=name, queue=queue, payload=orjson.dumps(payload), idempotency_key=key,
                     max_attempts=max_attempts)
        return self.driver.job_enqueue([job])[0].id

    def backends(self, where: str, *params: Any) -> list[tuple]:
        """(application_name, state, wait_event_type, query) of other sessions matching ``where``."""
        return self.sql("select application_name, state, wait_event_type, query from pg_stat_activity "
                        f"where pid <> pg_backend_pid() and datname = current_database() and ({where})",
                        *params)

    @contextlib.contextmanager
    def jobs_table_locked(self, hold_s: float) -> Iterator[None]:
        """The jobs table under an ACCESS EXCLUSIVE lock (every statement on it waits) from
        entry until exit, and at most ``hold_s`` seconds: a database stall, to order."""
        granted, release = threading.Event(), threading.Event()
        failed: list[BaseException] = []

        def hold() -> None:
            try:
                with psycopg.connect(self.dsn, autocommit=False) as conn:
                    conn.execute(f"lock table {self.schema}.jobs in access exclusive mode")
                    granted.set()
                    release.wait(hold_s)
                    conn.rollback()
            except BaseException as exc:   # reported to the test, never lost in the thread
                failed.append(exc)
                granted.set()
        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        granted.wait(10)
        if failed:
            raise failed[0]
        try:
            yield
        finally:
            release.set()
            thread.join(10)

    def job(self, job_id: int) -> dict:
        row = self.sql("select state, attempt, last_error from {schema}.jobs where id = %s", job_id)[0]
        return {"state": row[0], "attempt": row[1], "last_error": row[2]}

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.kill_everything()
        self.driver.close()


@pytest.fixture
def daemon_env(pg_dsn: str, tmp_path: Path) -> Iterator[DaemonEnv]:
    schema = new_schema_name()
    env = DaemonEnv(pg_dsn, schema, tmp_path)
    env.driver.migrate()
    env.sql(effects_ddl(schema))
    try:
        yield env
    finally:
        env.close()
        drop_schema(pg_dsn, schema)
