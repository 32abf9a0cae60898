"""From configuration to ``RoleSpec``s: which children to run and how each builds its role.

Every role is hosted the same way; this module only decides WHICH. Workers come from the
queues (``--queue emails=2x16``; by default every queue of the registry at 1x16). The
scheduler and the outbox relay join here when they exist, as specs of their own.

A spec's ``make(identity)`` runs in the CHILD after the fork, so the driver and its pool are
created there: the driver announces the child's identity as its ``application_name``, which
is how the supervisor later finds (and waits out) a dead child's sessions.

A worker's own statements (claim, ack, heartbeat, sweeps; never a body's ``ctx.transaction()``)
are capped server-side at ``WORKER_STATEMENT_TIMEOUT_MS``: a locked table or a stalled server
turns into an error the loop survives, so the child keeps reporting to the supervisor (which
waits at least a lease before calling it silent), and an orphan blocked in a call gets out.
"""

from __future__ import annotations

from typing import Any, Callable

from ..config import QueueSpec, Settings
from ..errors import ConcurrencyUnenforceable, InvalidOption
from ..registry import Registry
from .slots import RoleSpec

WORKER_STATEMENT_TIMEOUT_MS = 5000


def check_registry(registry: Registry) -> None:
    """Refuse what this daemon cannot run faithfully, before anything is forked."""
    if not registry.jobs():
        raise InvalidOption("app", "no jobs are registered: pass --app MODULE with @job declarations")
    capped = [h.name for h in registry.jobs() if h.concurrency is not None]
    if capped:
        raise ConcurrencyUnenforceable(
            f"job(s) {', '.join(capped)} declare concurrency=, and no fleet lease store exists "
            "to enforce a fleet-wide cap; remove concurrency= or run a release that has one")


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


def worker_maker(settings: Settings, registry: Registry, queue: str,
                 concurrency: int) -> Callable[[str], Any]:
    def make(identity: str) -> Any:
        from ..drivers.postgres import PostgresDriver
        from ..workers.queue_worker import QueueWorker
        # the loop's pool serves claim, ack, heartbeat and sweeps; bodies using
        # ctx.transaction() draw from their own pool, one connection each at most
        driver = PostgresDriver(settings.dsn, schema=settings.schema, application_name=identity,
                                pool_size=2, transaction_pool_size=concurrency,
                                statement_timeout_ms=WORKER_STATEMENT_TIMEOUT_MS)
        return QueueWorker(driver=driver, registry=registry, queue=queue, concurrency=concurrency,
                           settings=settings, identity=identity)
    return make


def role_specs(settings: Settings, registry: Registry) -> list[RoleSpec]:
    check_registry(registry)
    return [RoleSpec("worker", name, spec.processes, spec.concurrency,
                     worker_maker(settings, registry, name, spec.concurrency))
            for name, spec in resolve_queues(settings, registry).items()]
