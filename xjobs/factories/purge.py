"""``purge()``: the one job that deletes what the app's own stores let expire.

An app's stores (a rate-limit table, an idempotency ledger, login lockouts) each know how to
delete their expired rows, ``purge_expired(now_ms)``, but nothing calls them unless a job
does: a cron task only enqueues. ``purge()`` is that job, over ``job()``::

    sweep = purge(name="app-purge", targets=lambda: [rate_limits, idempotency, lockouts])
    task(name="app-purge-hourly", cron=DEFAULT_PURGE_CRON, tz="UTC", job=sweep)

Why each rule holds:

- ``targets`` is a callable, read once per attempt, so a store that only exists once the
  app's modules are imported (after the declaration) is still swept, and an attempt sees one
  consistent list.
- A target is anything with a ``name`` and ``purge_expired(now_ms) -> int`` (``PurgeTarget``,
  structural): a store needs no import of xjobs to qualify.
- Every name is checked, duplicates included, before the first delete: two targets under one
  name would share one step, so the second would replay the first's count and never run.
- One clock reading for the whole pass, recorded as the pass's first step and handed to every
  target: the stores compare their rows with the caller's time (the injected clock), and a
  pass resumed after a crash deletes against the same instant as the attempt it continues.
- One ``ctx.step.run`` per target (``purge:<name>``): a killed attempt resumes at the target
  it stopped on, and a replay answers each recorded target's count without calling it again.
  A target interrupted half-way runs again whole, which deleting expired rows tolerates.

The job declares no schedule: ``DEFAULT_PURGE_CRON`` is the hourly expression a ``task()``
pairs with it, so the app decides when (and whether) the sweep runs.
"""

from __future__ import annotations

from numbers import Integral
from typing import Callable, Iterable, Protocol, runtime_checkable

from ..clock import SYSTEM_CLOCK, Clock
from ..context import Ctx
from ..errors import InvalidOption
from ..options import plain_name
from ..registry import REGISTRY, JobHandle, Registry, job
from ..retry import Retry
from .declarations import one_declaration
from .refusals import PurgeTargetDuplicate, PurgeTargetInvalid

DEFAULT_PURGE_CRON = "0 * * * *"
"""Hourly, on the hour: the schedule a ``task()`` pairs with a ``purge()`` (which has none)."""
_CLOCK_STEP = "now"        # no target's step is named this: theirs all begin "purge:"


@runtime_checkable
class PurgeTarget(Protocol):
    """A store whose expired rows a purge deletes: ``purge_expired`` deletes the rows that
    expired by ``now_ms`` (epoch milliseconds) and answers how many it deleted."""

    @property
    def name(self) -> str: ...

    def purge_expired(self, now_ms: int) -> int: ...


def purge(*, name: str, targets: Callable[[], Iterable[PurgeTarget]], queue: str = "default",
          clock: Clock | None = None, retry: Retry | None = None, timeout: object = None,
          registry: Registry | None = None) -> JobHandle:
    """Declare the purge job ``name`` over ``job()``: enqueue it (or pair it with a ``task``)
    with the input ``{}``; its result is ``{"now_ms": ..., "purged": {target: rows}}``.
    ``clock``: where the pass's one reading comes from (the system's by default)."""
    name = plain_name(name, "purge.name")
    if not callable(targets):
        raise InvalidOption("purge.targets", f"must be a callable answering the targets, got "
                                             f"{type(targets).__name__}")
    source: Clock = SYSTEM_CLOCK if clock is None else clock
    if not callable(getattr(source, "now_ms", None)):
        raise InvalidOption("purge.clock", f"must have now_ms(), got {type(clock).__name__}")

    def sweep(ctx: Ctx, input: object) -> dict[str, object]:
        listed = _checked(name, targets())
        now_ms = int(ctx.step.run(_CLOCK_STEP, lambda: int(source.now_ms())))
        purged: dict[str, int] = {}
        for target in listed:
            purged[target.name] = int(ctx.step.run(f"purge:{target.name}", _pass(name, target, now_ms)))
        return {"now_ms": now_ms, "purged": purged}
    sweep.__doc__ = f"Delete what the targets of purge {name!r} let expire, one step per target."
    one_declaration(registry or REGISTRY, name, sweep, "purge", targets)
    # a malformed or doubled target is the app's code, not a passing fault: dead now, not retried
    return job(queue=queue, idempotency_key=lambda _: f"purge:{name}", tenant="none", name=name,
               retry=retry, timeout=timeout, terminal_on=(PurgeTargetInvalid,),
               registry=registry)(sweep)


def _checked(purge_name: str, answered: object) -> list[PurgeTarget]:
    """The attempt's targets, every one checked before any is called."""
    if isinstance(answered, (str, bytes)) or not isinstance(answered, Iterable):
        raise PurgeTargetInvalid(f"purge {purge_name!r}: targets() must answer a list of targets, "
                                 f"got {type(answered).__name__}")
    listed: list[PurgeTarget] = []
    seen: set[str] = set()
    for target in answered:
        target_name = getattr(target, "name", None)
        if not isinstance(target_name, str) or not callable(getattr(target, "purge_expired", None)):
            raise PurgeTargetInvalid(f"purge {purge_name!r}: {target!r} is no target: it needs a name "
                                     "(a string) and purge_expired(now_ms)")
        try:
            plain_name(target_name, "purge.target")     # it names a step: printable, unpadded
        except InvalidOption as exc:
            raise PurgeTargetInvalid(f"purge {purge_name!r}: target name {target_name!r}: {exc.reason}") from exc
        if target_name in seen:
            raise PurgeTargetDuplicate(f"purge {purge_name!r}: two targets are named {target_name!r}; "
                                       "nothing was deleted")
        seen.add(target_name)
        listed.append(target)
    return listed


def _pass(purge_name: str, target: PurgeTarget, now_ms: int) -> Callable[[], int]:
    return lambda: _deleted(purge_name, target, now_ms)


def _deleted(purge_name: str, target: PurgeTarget, now_ms: int) -> int:
    """What the target says it deleted: a whole number of rows, or the step fails."""
    count = target.purge_expired(now_ms)
    if isinstance(count, bool) or not isinstance(count, Integral) or count < 0:
        raise PurgeTargetInvalid(f"purge {purge_name!r}: {target.name}.purge_expired answered {count!r}, "
                                 "not a count of deleted rows")
    return int(count)


__all__ = ["DEFAULT_PURGE_CRON", "PurgeTarget", "purge"]
