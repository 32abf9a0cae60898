"""``xjobs.backfill(...)``: a one-off sweep over a table, declared as an ordinary job.

::

    def unset_emails(cursor, limit):                 # source: one page from cursor
        rows = db.execute("select id from users where email_lower is null and id > %s "
                          "order by id limit %s", (cursor or 0, limit)).fetchall()
        return rows, (rows[-1][0] if len(rows) == limit else None)

    def lower_emails(rows):                          # handle: idempotent, at least once
        db.execute("update users set email_lower = lower(email) where id = any(%s)",
                   ([r[0] for r in rows],))

    users_email = xjobs.backfill(name="users_email_lower", source=unset_emails,
                                 handle=lower_emails, batch=1000, rate=5, tenant="none",
                                 environments=["production", "staging"],
                                 count=lambda ctx: db.execute("select count(*) from users "
                                                              "where email_lower is null").fetchone()[0])

It returns a ``JobHandle`` made by ``job()``: enqueue, retries, cancel, dead letters, the
manifest and both operator surfaces treat it like any other job. Its name is ``name``, its
idempotency key ``backfill:<name>`` (one live pass per name, forced or not) and its input
``{}`` or ``{"force": true}`` (``force`` rides the input, never the key).

- ``source(cursor, limit) -> (rows, next_cursor)``: see ``paging.py``; ``None`` is the first
  cursor and the end marker. ``handle(rows)`` runs inside the batch's step, BEFORE its
  checkpoint, so at least once: it must be idempotent. It gets no ``ctx.step``
  (``xjobs.current()`` answers the run). Both are ``def`` functions.
- ``batch`` (rows a page, a whole number >= 1) and ``rate`` (batches a second, > 0 and finite;
  default 5) are tuning: neither is in the checksum.
- ``tenant``: as ``job()``'s. A backfill over ``tenant="none"`` holds the cross-tenant
  capability for its own pass; one with a real tenant never does.
- ``environments``: the names (the ``environment`` setting) it may run in; None: any.
- ``requires``: a precondition the CLI gate checks (``backfill_requires``): a callable taking a
  database connection (None on a driver without one), answering True, or False or a reason.
- ``count(ctx)``: how many rows still need the sweep, checked once after the last page; more
  than 0 is ``X_BACKFILL_STALLED``.

The checksum is sha256 over the source text of ``source`` and ``handle`` with a NUL between
them (a pair, not a concatenation). The handle is stamped privately: backfills are the jobs
of the registry that carry the stamp (``declared``); an app registers nothing else.
"""

from __future__ import annotations

import hashlib
import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import InvalidOption
from ..options import finite_count, plain_name
from ..registry import NO_TENANT, REGISTRY, JobHandle, Registry, job
from ..retry import Retry
from .declarations import one_declaration
from .pacer import Pacer
from .paging import MAX_LIMIT, Source
from .refusals import BackfillRefused, BackfillStalled

Handle = Callable[[Any], object]
Count = Callable[[Any], object]
Requires = Callable[[Any], object]


@dataclass(frozen=True, eq=False)
class BackfillSpec:
    """What a backfill declared, kept beside its handle (never in its input or its key)."""

    name: str
    source: Source
    handle: Handle
    batch: int
    pacer: Pacer
    tenant_none: bool
    environments: tuple[str, ...] | None
    requires: Requires | None
    count: Count | None
    checksum: str
    scope_reason: str = field(default="")


_STAMPS: "weakref.WeakKeyDictionary[JobHandle, BackfillSpec]" = weakref.WeakKeyDictionary()


def spec_of(handle: JobHandle) -> BackfillSpec | None:
    """The backfill a handle was declared as, or None for any other job."""
    return _STAMPS.get(handle)


def declared(registry: Registry | None = None) -> list[tuple[JobHandle, BackfillSpec]]:
    """The registry's backfills, derived from its jobs (sorted by name): one registry, never two."""
    found = []
    for handle in (registry if registry is not None else REGISTRY).jobs():
        spec = _STAMPS.get(handle)
        if spec is not None:
            found.append((handle, spec))
    return found


def source_text(fn: Callable[..., object]) -> str:
    """A function's source text; for one with none to read (a builtin, a REPL lambda), its
    qualified name, so the checksum still tells two apart."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def checksum_of(source: Callable[..., object], handle: Callable[..., object]) -> str:
    return hashlib.sha256(f"{source_text(source)}\x00{source_text(handle)}".encode()).hexdigest()


def _environments(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidOption("environments", f"must be a list of environment names, got {value!r}")
    names = tuple(sorted(plain_name(v, "environments") for v in value))
    if not names:
        raise InvalidOption("environments", "an empty list lets the backfill run nowhere; give None for anywhere")
    return names


def _function(value: object, option: str, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not callable(value):
        raise InvalidOption(option, f"must be a callable, got {type(value).__name__}")
    if inspect.iscoroutinefunction(value):
        raise InvalidOption(option, "must be a def function: a backfill's pass is synchronous")
    return value


def _input(value: object) -> None:
    if not isinstance(value, dict) or set(value) - {"force"} or not isinstance(value.get("force", False), bool):
        raise InvalidOption("backfill.input", f'takes {{}} or {{"force": true}}, got {value!r}')


def backfill(*, name: str, source: Source, handle: Handle, tenant: Any, batch: int = 1000,
             rate: float = 5, environments: object = None, requires: Requires | None = None,
             count: Count | None = None, queue: str = "default", retry: Retry | None = None,
             registry: Registry | None = None) -> JobHandle:
    """Declare a one-off sweep over a table as an ordinary job; answers its ``JobHandle``.

    ``source(cursor, limit)`` answers ``(rows, next_cursor)`` (``None`` starts, and ``None`` or
    an empty page ends); ``handle(rows)`` runs at least once per page, inside the page's durable
    step ``batch:<n>``, so it must be idempotent. ``batch`` rows a page, at most ``rate``
    batches a second (neither is in the checksum). ``tenant`` as for ``job()``: ``"none"``
    sweeps every tenant under a cross-tenant scope naming the backfill. ``environments``: the
    ``environment`` settings it may run in. ``requires(conn)``: the command line's precondition
    (``xjobs.backfill_requires``). ``count(ctx)``: rows still unswept after the last page; more
    than 0 is ``X_BACKFILL_STALLED``. Enqueue ``{}``, or ``{"force": true}`` to run again once
    completed; the key is ``backfill:<name>``. See docs/guides/backfill.md."""
    from .backfill_pass import run_pass
    name = plain_name(name, "name")
    source = _function(source, "source")
    handle = _function(handle, "handle")
    batch = finite_count(batch, "batch", minimum=1, maximum=MAX_LIMIT)
    pacer = Pacer(rate)
    if tenant is None:
        raise InvalidOption("tenant", 'a backfill says whose rows it sweeps: a callable, or tenant="none"')
    spec = BackfillSpec(name=name, source=source, handle=handle, batch=batch, pacer=pacer,
                        tenant_none=tenant == NO_TENANT, environments=_environments(environments),
                        requires=_function(requires, "requires", optional=True),
                        count=_function(count, "count", optional=True),
                        checksum=checksum_of(source, handle),
                        scope_reason=f"backfill {name!r} sweeps every tenant")

    def body(ctx: Any, input: Any) -> object:
        return run_pass(ctx, spec, force=bool(input.get("force", False)))
    # two declarations are one when the app's functions are the same (a module imported twice)
    one_declaration(registry if registry is not None else REGISTRY, name, body, "backfill", source, handle)
    declared_handle = job(name=name, queue=queue, idempotency_key=lambda i: f"backfill:{name}",
                          tenant=tenant, retry=retry, input=_input, cross_tenant=spec.tenant_none,
                          terminal_on=(BackfillRefused, BackfillStalled), registry=registry)(body)
    _STAMPS[declared_handle] = spec
    return declared_handle


__all__ = ["BackfillSpec", "backfill", "checksum_of", "declared", "spec_of"]
