"""What the arbiter supervises: role specs, slots, and the child processes filling them.

A ``RoleSpec`` says what to run (``worker`` for queue ``emails``, 2 processes of 16 jobs), how
to build it in a child (``make(identity) -> Role``) and what the supervisor does around it (its
``RolePolicy``, declared by the role: ``workers/role.py``). Each process of a spec is a ``Slot``
(``worker queue=emails #2``): it outlives the processes that fill it, and keeps their restart
count, consecutive failures, backoff and crash-loop flag. A ``Child`` is one process start::

    spawned ──hello──> starting ──ready──> ready ──accept/close──> draining ──stopped──> exited
       └─────────────── exits at any point: reaped ─────────────────────────────────────┘

A slot holds at most one current child and, while it is being replaced (reload, recycling),
one successor: the successor starts, and only once it is ready is the current child retired,
so replacing a child never leaves its queue without a claimer. A reload's retirement tells
the old child's running work to stop, as a drain does; a recycle's lets it finish.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import InvalidOption
from ..workers.role import Role, RoleGauge, RolePolicy, check_role_name, new_identity
from ..workers.telemetry import RoleStats
from .backoff import Backoff
from .framing import Channel

__all__ = ["Child", "RoleGauge", "RolePolicy", "RoleSpec", "Slot", "SpecKey", "new_identity"]

SpecKey = tuple[str, str | None]   # (role, queue): one group of slots
log = logging.getLogger("xjobs.supervisor")
@dataclass
class RoleSpec:
    """One group of slots: ``role`` (for ``queue`` when its policy is per queue), how many
    processes of how many jobs each, how a child builds it, and the role's policy. ``processes``
    and ``concurrency`` are the operator's for a per-queue role; a singleton runs 1 process and
    its concurrency means nothing (status shows none)."""
    role: str
    queue: str | None
    processes: int
    concurrency: int
    make: Callable[[str], Role] = field(repr=False, compare=False)
    policy: RolePolicy = field(default_factory=RolePolicy)
    runs_app: bool = True             # its children run the app's code (``roles.RoleKind``)

    def __post_init__(self) -> None:
        check_role_name(self.role)
        if self.policy.per_queue and not self.queue:
            raise InvalidOption("queue", f"role {self.role} runs per queue and needs one")
        if not self.policy.per_queue and (self.queue is not None or self.processes != 1):
            raise InvalidOption("processes", f"role {self.role} is a singleton: one process, no queue")

    @property
    def key(self) -> SpecKey:
        return (self.role, self.queue)

    @property
    def label(self) -> str:
        return f"{self.role} {self.queue}" if self.queue else self.role

    @property
    def shape(self) -> str:
        """``2x16`` for a per-queue group; a singleton has no shape to speak of."""
        return f"{self.processes}x{self.concurrency}" if self.policy.per_queue else "1 process"


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
    stats: RoleStats = field(default_factory=RoleStats)   # its last heartbeat's record
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
        pid: int | None = self.proc.pid   # multiprocess ships no types
        return pid

    @property
    def policy(self) -> RolePolicy:
        return self.slot.spec.policy

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
                os.kill(self.proc.pid, 9)
            except ProcessLookupError:
                pass

    def verdict(self, code: int) -> tuple[bool, str]:
        """Whether this child's death may be one of its jobs' doing, and which lone job its
        hand-back may charge (``job_release_worker``).

        The supervisor's own decisions (a drain deadline, a second stop signal, a retirement
        that ended cleanly) are nobody's fault. A process that died on its own, even while
        retiring, may have been killed by a job: the one job it ran alone is charged, unless its
        last report counted other bodies still running in it (a timed-out ``def`` body's
        thread, which the database no longer shows). A process killed for going silent is
        charged only for a job already under suspicion: a stalled database can silence a loop too.
        """
        if self.at_fault:
            return True, "suspect"
        if self.killed is not None or (self.retiring is not None and code == 0):
            return False, "never"
        return True, "alone" if self.in_flight <= 1 else "never"


@dataclass(eq=False)
class Slot:
    spec: RoleSpec
    index: int
    child: Child | None = None
    successor: Child | None = None
    want_replace: str | None = None   # a reason, while a successor should be started
    replace_interrupts: bool = False  # whether the child it replaces is told to stop its work
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

    def ask_replace(self, reason: str, *, interrupt: bool = False) -> None:
        """Start a successor beside the current child, which is retired once the successor is
        ready: told to stop its running work with ``interrupt`` (a reload: what changed takes
        over now), as its role's policy says a drain does; left to finish without (a recycle)."""
        self.want_replace, self.replace_interrupts = reason, interrupt

    def replaced(self) -> tuple[str, bool]:
        """The replacement asked for is done (or moot): its reason and whether it interrupts."""
        asked = (self.want_replace or "replaced", self.replace_interrupts)
        self.want_replace, self.replace_interrupts = None, False
        return asked

    # -- restarts: the backoff's bookkeeping (``backoff.py`` has the curves) -------------------------

    def restart_after(self, child: Child, how: str, now: float, backoff: Backoff) -> float:
        """Count an exit nobody asked for and set the next start; answers the delay."""
        self.restarts += 1
        self.exits = [t for t in self.exits if now - t < backoff.crash_window_s][-100:] + [now]
        if child.ready_at is None:
            # it never got ready: it cannot start, and restarting at once would only spin
            self.failures += 1
            delay = backoff.delay(self.failures)
        else:
            # it served and was killed, from outside or by a job (which pays per job): the
            # slot gets its process back within a second, sooner for a single death
            self.failures = 0
            delay = backoff.after_ready(sum(1 for t in self.exits if now - t < backoff.burst_window_s))
        self.next_start = now + delay
        self.last_exit = how + (f": {child.error}" if child.error else "")
        crash_loop = backoff.in_crash_loop(self.failures, len(self.exits))
        if crash_loop and not self.crash_loop:
            log.error("%s is in a crash loop: %d unexpected exit(s) in %.0fs, the last %s",
                      self.label, len(self.exits), backoff.crash_window_s, self.last_exit)
        self.crash_loop = crash_loop
        return delay

    def settle(self, child: Child, now: float, backoff: Backoff) -> None:
        """A ready child stable long enough clears the failures, and in time the crash loop."""
        if self.failures and child.ready_at is not None and now - child.ready_at >= backoff.stable_s:
            self.failures = 0
        if self.crash_loop and not self.failures and (
                not self.exits or now - self.exits[-1] >= backoff.crash_window_s):
            log.info("%s is stable again", self.label)
            self.crash_loop, self.exits = False, []


def describe_exit(code: int, killed: str | None) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"by {name}" + (f" ({killed})" if killed else "")
    return f"with code {code}"
