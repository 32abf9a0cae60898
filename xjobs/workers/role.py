"""The one contract every child actor implements, the policy it declares, and a base to start from.

A role is driven by its host's loop (``supervisor/child.py`` in a forked child,
``workers/host.py`` in this process, or a test calling the methods by hand); both hosts drive
it through the same phases (``host.Lifecycle``)::

    initialize() ─> ready ─> run_once(now) ... ─> stop_accepting(reason) ─> draining
                                                   (in_flight() falls to 0 or the deadline)
                                                ─> close(deadline) ─> stopped

* ``initialize()`` opens connections; nothing is opened before it (no connection crosses a fork).
* ``run_once(now_ms)`` does one pass of work and answers how many milliseconds it may sleep
  before it must be called again. The host also calls it early whenever one of
  ``wakeup_fds()`` turns readable.
* ``stop_accepting(reason, interrupt=True)`` is the accept phase: stop taking work at once
  and, unless ``interrupt`` is False (a replacement, or a role whose policy lets work
  ``finish`` at a drain), tell running work (``ctx.signal``); it must return immediately. A
  later call with ``interrupt=True`` still interrupts (a drain arriving during a replacement).
* ``close(deadline_monotonic_ms)`` is the close phase: settle what finished, abandon what did
  not by the deadline (its lease lapses and it is delivered again), release, close pools.
  It always returns, and is safe to call twice or before ``initialize()``.
* ``stats()`` is the role's record (``telemetry.RoleStats``; a worker's is
  ``stats.WorkerStats``), published over the pipe in every heartbeat; counters only grow
  within one process, and a stat that is a level rather than a count is declared as a
  ``RoleGauge``.

What the supervisor does AROUND a role is data, never a test of its name: each role declares a
``RolePolicy`` (one group per queue or a singleton, whether it is scaled or recycled, whether a
dead child's jobs are handed back, restart, what a drain means, its gauges). A new role is one
module under ``workers/`` holding a ``RoleBase`` subclass with its ``role`` name, its
``policy`` and its ``build`` (and, when it reports figures of its own, a ``RoleStats`` record
its policy names), plus one line in ``supervisor/roles.py`` where roles are listed.
"""

from __future__ import annotations

import re
import socket
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Literal, Protocol, Sequence, TypedDict, Unpack

from ..drivers.base import JobDriver
from ..errors import InvalidOption
from .telemetry import RoleStats

if TYPE_CHECKING:
    from typing import Self

    from ..config import Settings
    from ..registry import Registry

DrainMode = Literal["interrupt", "finish"]
RestartMode = Literal["always", "never"]
# a role name is part of every identity, which must fit Postgres' 63-byte application_name
# (``supervisor/slots.new_identity``), and of titles, logs and metric labels
ROLE_NAME = re.compile(r"[a-z][a-z0-9-]{0,20}")


@dataclass(frozen=True)
class RoleGauge:
    """A gauge a role exports from the field ``stat`` of its children's stats record, e.g. the
    scheduler's ``RoleGauge("xjobs_scheduler_leader", "leader", "1 while ... leads.")``. It is
    served only while a live child of the role has reported it, as the largest value reported,
    so a daemon that does not run the role never exports it. The stat is a level: it is never
    added up across restarts as the role's counters are."""
    family: str
    stat: str
    help: str


@dataclass(frozen=True)
class RolePolicy:
    """What the supervisor does around a role, declared by the role; the defaults fit a
    singleton that holds no job leases (a scheduler, a relay).

    per_queue        True: one group of processes per queue it serves, sized ``PROCSxCONC`` by
                     the operator (``xjobsd status`` shows its queue, processes and concurrency,
                     its ``in_flight`` counts toward ``xjobs_in_flight{queue}``). False: a
                     singleton, one process per daemon, no queue, no concurrency.
    scalable         ``xjobsd scale``, SIGTTIN and SIGTTOU change its process count (per queue).
    recyclable       replaced, without a gap, after ``--recycle-after-jobs`` claims (its
                     record's ``job_counts().claimed``) or above ``--recycle-above-rss``.
    hands_back_jobs  it runs jobs under leases in its identity's name: when one of its children
                     exits, the supervisor's probe hands its still-running jobs back once the
                     child's database sessions are gone, instead of waiting for the leases.
    restart          ``always``: an unexpected exit is restarted with the daemon's backoff (a
                     crash loop is reported). ``never``: the slot is given up (logged as an
                     error) until the next reload.
    drain            what the accept phase of a drain means: ``interrupt`` tells running work to
                     stop (``ctx.signal``); ``finish`` stops taking work and lets what runs end
                     by itself until the deadline. A reload's replacement drains as a drain
                     does; a recycle or a scale-down never interrupts.
    gauges           the ``RoleGauge``s it exports on ``/metrics``.
    stats            the class of its ``stats()`` record, which the supervisor reads its
                     heartbeats back into.
    """
    per_queue: bool = False
    scalable: bool = False
    recyclable: bool = False
    hands_back_jobs: bool = False
    restart: RestartMode = "always"
    drain: DrainMode = "interrupt"
    gauges: tuple[RoleGauge, ...] = ()
    stats: type[RoleStats] = RoleStats

    def __post_init__(self) -> None:
        if self.scalable and not self.per_queue:
            raise InvalidOption("policy", "only a per_queue role can be scaled: scale counts processes per queue")
        if self.restart not in ("always", "never"):
            raise InvalidOption("policy", f"restart must be 'always' or 'never', got {self.restart!r}")
        if self.drain not in ("interrupt", "finish"):
            raise InvalidOption("policy", f"drain must be 'interrupt' or 'finish', got {self.drain!r}")
        if not all(isinstance(g, RoleGauge) for g in self.gauges):
            raise InvalidOption("policy", "gauges must be RoleGauge declarations")
        if not (isinstance(self.stats, type) and issubclass(self.stats, RoleStats)):
            raise InvalidOption("policy", "stats must be a RoleStats class")

    @property
    def interrupts(self) -> bool:
        """Whether a drain's accept phase tells this role's running work to stop."""
        return self.drain == "interrupt"

    def gauge_stats(self) -> frozenset[str]:
        return frozenset(g.stat for g in self.gauges)


class Role(Protocol):
    role: str            # "worker", "scheduler", "outbox-relay", ... (``ROLE_NAME``)
    queue: str | None    # the queue a per-queue role serves; None for a singleton
    identity: str        # unique per process start; what the database records as claimed_by

    def initialize(self) -> None: ...
    def wakeup_fds(self) -> Sequence[int]: ...
    def run_once(self, now_ms: float) -> float: ...
    def stop_accepting(self, reason: str, interrupt: bool = True,
                       deadline_ms: float | None = None) -> None: ...
    # deadline_ms: when the drain ends, on the clock of run_once's now_ms (None: unbounded)
    def in_flight(self) -> int: ...
    def close(self, deadline_monotonic_ms: float | None) -> None: ...
    def stats(self) -> RoleStats: ...


class PoolOptions(TypedDict, total=False):
    """The sizes of a role's connection pools (the driver's defaults for those not given)."""
    pool_size: int                  # the driver's own verbs: claim, ack, renewal, sweeps
    step_pool_size: int             # every run's step statements, shared
    transaction_pool_size: int      # bodies' ``ctx.transaction()``, one connection each at most


class Connect(Protocol):
    """``connect(**pool_options)``: a driver whose sessions carry the child's identity as their
    application_name (how the supervisor finds a dead child's sessions)."""

    def __call__(self, **options: Unpack[PoolOptions]) -> JobDriver: ...


@dataclass(frozen=True)
class RoleContext:
    """What a child hands a role's ``build`` once it is forked (``supervisor/roles.py``)."""
    identity: str
    settings: "Settings"
    registry: "Registry"
    connect: Connect
    queue: str | None = None
    concurrency: int = 1
    daemon: str = ""         # the supervisor's identity, the same for every child it forks
                             # (a role holding a fleet-wide lease holds it in the daemon's name)


class RoleBase:
    """Sensible defaults for every method of ``Role``; a subclass names itself, declares its
    policy and writes ``run_once`` (and whatever of the rest it needs)::

        class Relay(RoleBase):
            role = "outbox-relay"
            policy = RolePolicy(drain="finish", gauges=(RoleGauge("xjobs_outbox_pending", ...),))

            @classmethod
            def build(cls, context): return cls(context.identity, driver=context.connect(pool_size=1))

    The defaults: nothing to open, no wake-up fd, nothing in flight, no figures (a bare
    ``RoleStats``); accept phase and close only record that they happened (close is
    idempotent and safe before initialize).
    """

    role: str
    policy: ClassVar[RolePolicy] = RolePolicy()

    def __init__(self, identity: str, queue: str | None = None) -> None:
        self.identity = identity
        self.queue = queue
        self.accepting = False
        self.interrupted: str | None = None   # the reason running work was told to stop
        self.closed = False

    @classmethod
    def build(cls, context: RoleContext) -> "Self":
        """Construct the role in a fresh child; override to open a driver (``context.connect``)."""
        return cls(context.identity, context.queue)

    def initialize(self) -> None:
        self.accepting = True

    def wakeup_fds(self) -> Sequence[int]:
        return ()

    def run_once(self, now_ms: float) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define run_once(now_ms)")

    def stop_accepting(self, reason: str, interrupt: bool = True,
                       deadline_ms: float | None = None) -> None:
        self.accepting = False
        if interrupt and self.interrupted is None:
            self.interrupted = reason

    def in_flight(self) -> int:
        return 0

    def close(self, deadline_monotonic_ms: float | None) -> None:
        self.accepting = False
        self.closed = True

    def stats(self) -> RoleStats:
        return RoleStats(in_flight=self.in_flight())


_HOST = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:24] or "host"


def close_each(closers: Sequence[Callable[[], None]]) -> None:
    """Call every closer, even those after one that failed; the first failure is raised last,
    so a close that fails half-way still lets go of every resource after it."""
    failure: BaseException | None = None
    for close in closers:
        try:
            close()
        except Exception as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


def new_identity(role: str) -> str:
    """Unique per process start, so a restarted child can never settle its predecessor's jobs,
    and at most 63 ASCII characters, because it doubles as the sessions' ``application_name``
    (which Postgres truncates there) by which the supervisor finds a dead child's sessions."""
    return f"{role}:{_HOST}:{uuid.uuid4().hex[:16]}"


def check_role_name(name: str) -> str:
    if not isinstance(name, str) or not ROLE_NAME.fullmatch(name):
        raise InvalidOption("role", f"a role name is 1-21 of a-z, 0-9 and '-', starting with a letter; got {name!r}")
    return name
