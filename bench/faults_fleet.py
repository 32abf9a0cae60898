"""The battery's daemons: ``xjobsd run --app faults_app`` supervisors on one database.

Each ``Supervisor`` is one SLOT of the fleet (``a``, ``b``): started, killed, restarted
(perhaps under libfaketime), drained. Every process it ever started is a ``Generation`` with
how it ended, so "every xjobsd exits 0 at a drain" is checked over all of them, and the logs
of every generation are kept in the run's log directory.

Settings are short on purpose (lease 4 s, heartbeat 1 s, leader lease 3 s, rescue 1 s), so a
fault's consequences (a lapsed lease, a leader failover, an outbox claim running out) play
out in seconds and a run of a minute still sees them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from daemon import wait_control_ready
from faults_proxy import Proxy
from xjobs.control_client import ControlUnavailable, request

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
XJOBSD = str(Path(sys.executable).with_name("xjobsd"))
QUEUES = ("work=2x8", "steps=1x8", "limited=1x6")
TENANT_LIMIT = 2
SETTINGS = {"XJOBS_LEASE": "4s", "XJOBS_HEARTBEAT": "1s", "XJOBS_LEADER_LEASE": "3s", "XJOBS_OUTBOX_LEASE": "4s",
            "XJOBS_RESCUE": "1s", "XJOBS_POLL": "500ms", "XJOBS_WAKE": "250ms", "XJOBS_LIMITS": f"tenant={TENANT_LIMIT}"}
LEASE_S = 4.0
HEARTBEAT_S = 1.0
SILENCE_S = max(10.0, LEASE_S + HEARTBEAT_S)   # the supervisor kills a child silent this long
DRAIN_DEADLINE_S = 10.0
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1", "/usr/local/lib/faketime/libfaketimeMT.so.1")


def faketime_library() -> str | None:
    """libfaketime (Debian's ``faketime`` package), or None."""
    chosen = os.environ.get("XJOBS_FAULTS_FAKETIME")
    for path in ([chosen] if chosen else []) + list(FAKETIME_LIBS):
        if path and os.path.isfile(path):
            return path
    return None


@dataclass
class Generation:
    """One ``xjobsd`` process of a slot and how it ended."""
    pid: int
    log: Path
    skew_s: float
    started_at: float
    ended: str = ""            # "drained" (SIGTERM: must exit 0), "killed" (SIGKILL by the battery),
                               # "died" (exited before anyone stopped it)
    exit_code: int | None = None


@dataclass
class Supervisor:
    name: str
    dsn: str                   # what the daemon connects to (the proxy)
    logs: Path
    socket_path: str           # the battery's datagram socket (faults_app.tell)
    proxy: Proxy               # what ``dsn`` points at
    generations: list[Generation] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    skew_s: float = 0.0

    @property
    def control(self) -> str:
        return str(self.logs / f"{self.name}.sock")

    def start(self, skew_s: float = 0.0) -> None:
        """Start a new generation; ``skew_s`` > 0 runs it under libfaketime that far ahead."""
        env = {**os.environ, **SETTINGS, "XJOBS_DATABASE_URL": self.dsn, "XJOBS_SCHEMA": "xjobs",
               "FAULTS_SOCKET": self.socket_path, "FAULTS_SKEW_S": str(skew_s),
               "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        env.pop("NOTIFY_SOCKET", None)
        if skew_s:
            library = faketime_library()
            assert library is not None
            env.update({"LD_PRELOAD": library, "FAKETIME": f"+{int(skew_s)}s",
                        # intervals stay real: only the wall clock is wrong, as on a machine whose NTP broke
                        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"})
        argv = [XJOBSD, "run", "--app", "faults_app", "--control", self.control, "--metrics", "off",
                "--drain-deadline", f"{DRAIN_DEADLINE_S:g}s", "--stats-interval", "1s",
                *[arg for q in QUEUES for arg in ("--queue", q)]]
        log = self.logs / f"{self.name}-{len(self.generations) + 1}.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, cwd=self.logs, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.skew_s = skew_s
        self.generations.append(Generation(self.proc.pid, log, skew_s, time.time()))

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> dict:
        assert self.proc is not None
        return wait_control_ready(self.control, self.proc, timeout, log=self.current.log)

    def status(self, timeout: float = 3.0) -> dict | None:
        if not self.alive():
            return None
        try:
            return request(self.control, "status", timeout_s=timeout)
        except (ControlUnavailable, OSError, ValueError):
            return None

    def children(self, status: dict | None = None) -> list[dict]:
        status = status if status is not None else self.status()
        return [c for c in (status or {}).get("children", []) if c.get("pid")]

    def ready(self) -> bool:
        """Running, and every child up and ready (what recovery waits for)."""
        status = self.status()
        return bool(status and status.get("state") == "running" and status.get("children")
                    and all(c.get("state") == "ready" and c.get("pid") for c in status["children"]))

    def kill(self) -> list[int]:
        """SIGKILL the supervisor alone (its children must notice and go); answers their pids."""
        assert self.proc is not None
        kids = [c["pid"] for c in self.children()]
        self.proc.kill()
        self.current.exit_code = self.proc.wait(10)
        self.current.ended = "killed"
        return kids

    def terminate(self) -> None:
        """SIGTERM, once: the drain (a second one would skip to the kill)."""
        if self.proc is None or self.current.ended:
            return
        if self.proc.poll() is not None:
            self.current.ended = "died"        # nobody stopped it: it exited on its own before
            return
        self.current.ended = "drained"
        self.proc.send_signal(signal.SIGTERM)

    def drain(self, timeout: float | None = None) -> int | None:
        """SIGTERM and wait: the exit code, or None when it outlived ``timeout`` (then killed)."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            code = self.proc.wait(timeout if timeout is not None else DRAIN_DEADLINE_S + 30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            code = None
        self.current.exit_code = code
        return code

    def kill_everything(self) -> None:
        """Whatever is left of this slot's processes, SIGKILLed (the battery's own cleanup)."""
        for gen in self.generations:
            try:
                os.killpg(gen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def pid_state(pid: int) -> str | None:
    """The state letter of ``pid`` (R, S, T, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    state = pid_state(pid)
    return state is not None and state not in ("Z", "X")
