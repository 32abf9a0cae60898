"""From configuration to ``RoleSpec``s: the roles this daemon runs, listed once, in ``ROLES``.

Every role is hosted the same way; this module only says WHICH, and how each is built. A role
is a ``RoleKind``: its name, its ``RolePolicy`` (what the supervisor does around it) and its
``build(RoleContext) -> Role``. A per-queue role gets one group per served queue
(``--queue emails=2x16``; by default every queue of the registry at 1x16); a singleton gets
one process per daemon. A new role is a ``RoleBase`` subclass in its own module under
``workers/`` and one line here: ``RoleKind.of(Scheduler)``.

A spec's ``make(identity)`` runs in the CHILD after the fork, so the driver and its pool are
created there: ``RoleContext.connect`` names every session by the child's identity (its
``application_name``), which is how the supervisor later finds (and waits out) a dead child's
sessions.

A role's own statements (claim, ack, heartbeat, sweeps; never a body's ``ctx.transaction()``)
are capped server-side at ``ROLE_STATEMENT_TIMEOUT_MS``: a locked table or a stalled server
turns into an error the loop survives, so the child keeps reporting to the supervisor (which
waits at least a lease before calling it silent), and an orphan blocked in a call gets out.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Callable, Unpack

from ..config import QueueSpec, Settings
from ..errors import InvalidOption
from ..registry import Registry
from ..workers.outbox_relay import OutboxRelay
from ..workers.queue_worker import QueueWorker
from ..drivers.base import JobDriver
from ..workers.role import Connect, PoolOptions, Role, RoleBase, RoleContext, RolePolicy, check_role_name
from ..workers.scheduler import Scheduler
from .slots import RoleSpec

ROLE_STATEMENT_TIMEOUT_MS = 5000


@dataclass(frozen=True)
class RoleKind:
    """One role this daemon can run: a line in ``ROLES``. ``runs_app``: whether its children
    run the app's code (job bodies, scans), so that a reload bringing new code replaces
    them; True unless a role says otherwise, since a role left on old code would run it
    beside its restarted children's new code."""
    role: str
    policy: RolePolicy
    build: Callable[[RoleContext], Role]
    runs_app: bool = True

    def __post_init__(self) -> None:
        check_role_name(self.role)

    @classmethod
    def of(cls, role_class: type[RoleBase], *, runs_app: bool = True) -> "RoleKind":
        """A role that carries its name, policy and build on its class (``RoleBase``)."""
        return cls(role_class.role, role_class.policy, role_class.build, runs_app)


ROLES: tuple[RoleKind, ...] = (
    RoleKind.of(QueueWorker),
    RoleKind.of(Scheduler),
    RoleKind.of(OutboxRelay, runs_app=False),   # it moves staged rows; no body or scan runs in it
)


def check_registry(registry: Registry) -> None:
    """Refuse what this daemon cannot run faithfully, before anything is forked."""
    if not registry.jobs():
        raise InvalidOption("app", "no jobs are registered: pass --app MODULE with @job declarations")


_daemon: tuple[int, str] | None = None


def daemon_identity() -> str:
    """This supervisor's identity, made once per process: every child it forks (and every
    child that replaces one) shares it, so the scheduler's lease survives a child's restart."""
    global _daemon
    if _daemon is None or _daemon[0] != os.getpid():
        host = re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:24] or "host"
        _daemon = (os.getpid(), f"xjobsd:{host}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    return _daemon[1]


def resolve_queues(settings: Settings, registry: Registry) -> dict[str, QueueSpec]:
    """The configured queues, each checked to have registered jobs; default: all at 1x16."""
    served = set(registry.queues())
    if not settings.queues:
        return {name: QueueSpec() for name in sorted(served)}
    idle = [name for name in settings.queues if name not in served]
    if idle:
        raise InvalidOption("queue", f"no registered job uses queue(s) {', '.join(map(repr, idle))}; "
                                     f"registered queues: {', '.join(sorted(served)) or 'none'}")
    return dict(settings.queues)


def registered_queues(registry: Registry) -> dict[str, list[str]]:
    """Every queue a registered job uses, with the names of its jobs."""
    out: dict[str, list[str]] = {}
    for handle in registry.jobs():
        out.setdefault(handle.queue, []).append(handle.name)
    return out


def unserved_jobs(settings: Settings, registry: Registry) -> dict[str, list[str]]:
    """Registered jobs whose queue this configuration gives no process: they would wait
    forever unless another daemon serves their queue."""
    served = set(resolve_queues(settings, registry))
    return {queue: names for queue, names in registered_queues(registry).items() if queue not in served}


def describe_unserved(stranded: dict[str, list[str]]) -> str:
    return "; ".join(f"{', '.join(names)} on queue {queue!r}" for queue, names in sorted(stranded.items()))


def refuse_unserved(settings: Settings, registry: Registry) -> None:
    """``--strict``: a registered job whose queue no process of this configuration serves is
    refused, at start and at every reload."""
    stranded = unserved_jobs(settings, registry)
    if stranded:
        raise InvalidOption("queue", f"no process serves these registered jobs (--strict): "
                                     f"{describe_unserved(stranded)}")


def connector(settings: Settings, identity: str) -> Connect:
    """``connect(**pool_options)`` for a child: a driver whose sessions carry its identity."""
    def connect(**pool_options: Unpack[PoolOptions]) -> JobDriver:
        from ..drivers.postgres import PostgresDriver
        return PostgresDriver(settings.dsn or "", schema=settings.schema, application_name=identity,
                              statement_timeout_ms=ROLE_STATEMENT_TIMEOUT_MS, **pool_options)
    return connect


def maker(kind: RoleKind, settings: Settings, registry: Registry, queue: str | None,
          concurrency: int) -> Callable[[str], Role]:
    """What a child calls, once forked, to build its role."""
    daemon = daemon_identity()   # taken in the supervisor, before the fork
    def make(identity: str) -> Role:
        return kind.build(RoleContext(identity=identity, settings=settings, registry=registry,
                                      connect=connector(settings, identity), queue=queue,
                                      concurrency=concurrency, daemon=daemon))
    return make


def kind_specs(kind: RoleKind, settings: Settings, registry: Registry,
               queues: dict[str, QueueSpec]) -> list[RoleSpec]:
    if not kind.policy.per_queue:
        return [RoleSpec(kind.role, None, 1, 1, maker(kind, settings, registry, None, 1), kind.policy,
                         runs_app=kind.runs_app)]
    return [RoleSpec(kind.role, name, spec.processes, spec.concurrency,
                     maker(kind, settings, registry, name, spec.concurrency), kind.policy,
                     runs_app=kind.runs_app)
            for name, spec in queues.items()]


def role_specs(settings: Settings, registry: Registry, roles: tuple[RoleKind, ...] = ROLES) -> list[RoleSpec]:
    check_registry(registry)
    queues = resolve_queues(settings, registry)
    return [spec for kind in roles for spec in kind_specs(kind, settings, registry, queues)]


def queue_specs(settings: Settings, registry: Registry, queue: str, processes: int, concurrency: int,
                roles: tuple[RoleKind, ...] = ROLES) -> list[RoleSpec]:
    """The groups serving one more queue (``xjobsd scale`` of a declared, unserved queue)."""
    added = {queue: QueueSpec(processes=processes, concurrency=concurrency)}
    return [spec for kind in roles if kind.policy.per_queue
            for spec in kind_specs(kind, settings, registry, added)]
