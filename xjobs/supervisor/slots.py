"""What the arbiter supervises: role specs, slots, and the child processes filling them.

A ``RoleSpec`` says what to run (``worker`` for queue ``emails``, 2 processes of 16 jobs) and
how to build it in a child (``make(identity) -> Role``). Each process of a spec is a ``Slot``
(``worker queue=emails #2``): it outlives the processes that fill it, and keeps their restart
count, consecutive failures, backoff and crash-loop flag. A ``Child`` is one process start::

    spawned ──hello──> starting ──ready──> ready ──accept/close──> draining ──stopped──> exited
       └─────────────── exits at any point: reaped ─────────────────────────────────────┘

A slot holds at most one current child and, while it is being replaced (reload, recycling),
one successor: the successor starts, and only once it is ready is the current child retired,
so replacing a child never leaves its queue without a claimer.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..workers.role import Role
from .framing import Channel

_HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:24] or "host"


def new_identity(role: str) -> str:
    """Fresh per process start and at most 63 ASCII characters, because Postgres truncates an
    ``application_name`` there and the supervisor finds a dead child's sessions by it."""
    return f"{role}:{_HOST}:{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class RoleGauge:
    """A gauge a role exports from its children's heartbeat ``stats[stat]``, e.g. the
    scheduler's ``RoleGauge("xjobs_scheduler_leader", "leader", "1 while ... leads.")``. It is
    served only while a live child of the role has reported it, as the largest value reported,
    so a daemon that does not run the role never exports it."""
    family: str
    stat: str
    help: str


@dataclass
class RoleSpec:
    role: str
    queue: str | None
    processes: int
    concurrency: int
    make: Callable[[str], Role] = field(repr=False, compare=False)
    gauges: tuple[RoleGauge, ...] = ()

    @property
    def key(self) -> tuple[str, str | None]:
        return (self.role, self.queue)


@dataclass(eq=False)
class Child:
    slot: "Slot"
    identity: str
    proc: Any                         # a multiprocess Process (fork context)
    channel: Channel
    started_at: float                 # time.monotonic()
    state: str = "spawned"
    last_seen: float = 0.0
    ready_at: float | None = None
    pinged_at: float = 0.0
    stats: dict = field(default_factory=dict)
    in_flight: int = 0
    retiring: str | None = None       # why it was asked to go (its exit is then expected)
    interrupted: bool = False         # whether that request also stopped its running jobs
    kill_at: float | None = None      # SIGKILL if still alive then
    killed: str | None = None         # why the supervisor killed it
    at_fault: bool = False            # killed for its own failing (silence), not by decision
    close_sent: bool = False
    error: str | None = None          # what the child said when it stopped
    exit_code: int | None = None
    rss_checked: float = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def role(self) -> str:
        return self.slot.spec.role

    @property
    def queue(self) -> str | None:
        return self.slot.spec.queue

    @property
    def title(self) -> str:
        where = f" queue={self.queue}" if self.queue is not None else ""
        return f"{self.role}{where} #{self.slot.index} (pid {self.pid})"

    def kill(self, why: str, *, at_fault: bool = False) -> None:
        # exitcode polls waitpid: once reaped (here or by multiprocess) the pid may be reused
        if self.exit_code is None and self.killed is None and self.proc.exitcode is None:
            self.killed, self.at_fault = why, at_fault
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


@dataclass(eq=False)
class Slot:
    spec: RoleSpec
    index: int
    child: Child | None = None
    successor: Child | None = None
    want_replace: str | None = None   # a reason, while a successor should be started
    failures: int = 0                 # failed starts in a row (see backoff.py)
    exits: list[float] = field(default_factory=list)   # times of recent unexpected exits
    restarts: int = 0
    next_start: float = 0.0
    crash_loop: bool = False
    last_exit: str | None = None

    @property
    def key(self) -> tuple[str, str | None, int]:
        return (self.spec.role, self.spec.queue, self.index)

    @property
    def label(self) -> str:
        where = f" queue={self.spec.queue}" if self.spec.queue is not None else ""
        return f"{self.spec.role}{where} #{self.index}"

    def children(self) -> list[Child]:
        return [c for c in (self.child, self.successor) if c is not None]
