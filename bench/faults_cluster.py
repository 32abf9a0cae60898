"""A private PostgreSQL cluster for the fault battery: initdb into a temporary directory, its
own port and ``max_connections``, restarted and crowded at will, stopped and removed at the
end. The battery never touches any other server: restarting PostgreSQL or exhausting its
connections is only ever done to this one.

Binaries: ``XJOBS_FAULTS_PG_BIN`` if set, else the newest ``/usr/lib/postgresql/*/bin``, else
the directory of ``pg_ctl`` on ``PATH``, else the ``pgserver`` package's bundled build. initdb
and the server refuse to run as root, so as root they run as the OS user ``postgres`` (or
``pgserver``, the user the embedded database runs as), by ``setuid`` in the child process:
no ``runuser`` or ``su`` is needed. Authentication is ``trust``: the cluster listens on
127.0.0.1 and on a Unix socket inside its own directory, and lives for one run.

Roles: ``postgres`` (superuser: the battery's own bookkeeping, the storm, the pin, the
connection hog, which may use the superuser-reserved slots) and ``xjobs`` (a plain role owning
the database ``faults``: the daemons and the application), so exhausting the ordinary slots
reaches xjobs and never the battery's own watch.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from typing import Iterator

import psycopg

DATABASE = "faults"
APP_ROLE = "xjobs"


def _version_key(path: Path) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in path.parent.name.split("."))
    except ValueError:
        return (0,)


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: list[Path] = []
    if os.environ.get("XJOBS_FAULTS_PG_BIN"):
        candidates.append(Path(os.environ["XJOBS_FAULTS_PG_BIN"]))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(os.path.realpath(on_path)).parent)
    for directory in [*candidates, None]:
        if directory is None:    # last: the embedded extra's own build (importing it warns)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    import pgserver._commands as bundled
            except ImportError:
                return None
            directory = Path(bundled.POSTGRES_BIN_PATH)
        if all((directory / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _os_user() -> pwd.struct_passwd | None:
    """Who runs initdb and the server: None for this process's own user (not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and there is no OS user 'postgres' or 'pgserver' to run "
                       "PostgreSQL as (it refuses root): create one, or run the battery as another user")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One private cluster. ``start()`` it, use ``dsn()``, ``restart(mode)``; ``remove()``
    stops it (immediately) and deletes its directory, and is safe to call twice."""

    def __init__(self, *, max_connections: int = 120, reserved: int = 5) -> None:
        bindir = find_binaries()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries found (initdb, pg_ctl, postgres): install "
                               "postgresql, or the embedded extra (pgserver), or set XJOBS_FAULTS_PG_BIN")
        self.bindir = bindir
        self.max_connections = max_connections
        self.reserved = reserved
        self.user = _os_user()
        self.root = Path(tempfile.mkdtemp(prefix="xjobs-faults-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.started = False
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        os.chmod(self.root, 0o700)

    # -- running the binaries as the cluster's OS user -----------------------------------------------

    def _run(self, exe: str, *args: str, timeout: float = 120.0) -> str:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        for var in ("LD_PRELOAD", "FAKETIME", "PGHOST", "PGPORT", "PGDATA", "PGUSER"):
            env.pop(var, None)
        kwargs: dict = {}
        if self.user is not None:
            kwargs = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
            env["HOME"] = str(self.root)
        done = subprocess.run([str(self.bindir / exe), *args], env=env, cwd=self.root, capture_output=True,
                              text=True, timeout=timeout, start_new_session=True, **kwargs)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{exe} {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}\n{tail}")
        return done.stdout

    def _pg_ctl(self, *args: str, timeout: float = 120.0) -> str:
        return self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), *args, timeout=timeout)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> "Cluster":
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        settings = {
            "port": self.port, "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.root}'",
            "max_connections": self.max_connections, "superuser_reserved_connections": self.reserved,
            # a cluster for one run: durability against an OS crash is not what is tested here
            # (a server crash is: "immediate" restarts replay the WAL, which fsync does not change)
            "fsync": "off", "full_page_writes": "off", "shared_buffers": "'64MB'",
            "max_wal_size": "'512MB'", "log_min_messages": "warning", "log_line_prefix": "'%m [%p] '",
            "idle_in_transaction_session_timeout": 0, "statement_timeout": 0,
        }
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# bench/faults_cluster.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self._pg_ctl("-w", "-t", "60", "start")
        self.started = True
        with self.connect(database="postgres") as conn:
            conn.execute(f"create role {APP_ROLE} login")
            conn.execute(f"create database {DATABASE} owner {APP_ROLE}")
        return self

    def restart(self, mode: str) -> float:
        """Stop the server in ``mode`` (``fast``: sessions ended, a checkpoint; ``immediate``:
        every process killed, crash recovery at start) and start it again; the seconds taken."""
        began = time.monotonic()
        self._pg_ctl("-w", "-t", "120", "-m", mode, "restart")
        return time.monotonic() - began

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def remove(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and delete its directory."""
        if self.started:
            self.started = False
            try:
                self._pg_ctl("-w", "-t", "30", "-m", "immediate", "stop", timeout=40)
            except (RuntimeError, subprocess.TimeoutExpired):
                pid = self.postmaster_pid()
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- connecting ------------------------------------------------------------------------------------

    def dsn(self, *, user: str = APP_ROLE, port: int | None = None, database: str = DATABASE,
            application_name: str | None = None) -> str:
        """A URL for ``user`` over TCP on 127.0.0.1 (``port``: a proxy's in front of the server)."""
        dsn = f"postgresql://{user}@127.0.0.1:{port or self.port}/{database}"
        return dsn + (f"?application_name={application_name}" if application_name else "")

    def connect(self, *, user: str = "postgres", database: str = DATABASE, application_name: str = "faults-admin",
                **kwargs) -> psycopg.Connection:
        return psycopg.connect(self.dsn(user=user, database=database), autocommit=True,
                               application_name=application_name, connect_timeout=5, **kwargs)

    @contextlib.contextmanager
    def session(self, **kwargs) -> Iterator[psycopg.Connection]:
        with self.connect(**kwargs) as conn:
            yield conn
