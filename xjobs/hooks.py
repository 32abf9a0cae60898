"""``@xjobs.on_worker_start`` and ``@xjobs.on_worker_stop``: what a worker must build itself.

A body runs in a worker process forked from the supervisor, and a client holding sockets or
threads (a database pool, an HTTP client, an SDK) does not survive a fork: built at import
time it is shared with the parent, or half-dead in the child. These hooks build it in the
worker and let go of it there::

    pool = None

    @xjobs.on_worker_start
    def open_pool():
        global pool
        pool = ConnectionPool(DSN)

    @xjobs.on_worker_stop
    def close_pool():
        pool.close()

A hook takes no arguments and may be a ``def`` or an ``async def``: an async one is awaited on
the event loop the worker's async bodies run on, so what it builds (an ``httpx.AsyncClient``,
an ``asyncpg`` pool) is bound to the loop that uses it. Start hooks run in declaration order
before the worker's first claim, stop hooks in reverse order at its close; what runs them and
how a failure is met is ``workers/process_hooks.py``. The same function declared twice (its
module imported twice) is one hook.
"""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar

from .errors import InvalidOption
from .registry import REGISTRY, Registry
from .sites import declaration_site

WorkerHook = Callable[[], object]    # a def or an async def, called with no arguments
_Hook = TypeVar("_Hook", bound=Callable[[], object])


def on_worker_start(fn: _Hook, *, registry: Registry | None = None) -> _Hook:
    """Run ``fn()`` in every worker, after the fork and before its first claim. A hook that
    raises stops that worker with ``X_WORKER_START_FAILED``."""
    _add((registry if registry is not None else REGISTRY).worker_start, fn, "on_worker_start")
    return fn


def on_worker_stop(fn: _Hook, *, registry: Registry | None = None) -> _Hook:
    """Run ``fn()`` in every worker at its close, once its bodies are done or handed back,
    within ``worker_stop_timeout``; a failure is logged, never raised."""
    _add((registry if registry is not None else REGISTRY).worker_stop, fn, "on_worker_stop")
    return fn


def _add(hooks: list[WorkerHook], fn: object, what: str) -> None:
    if not callable(fn):
        raise InvalidOption(what, f"decorates a function taking no arguments, got {fn!r}")
    try:
        inspect.signature(fn).bind()
    except TypeError:
        raise InvalidOption(what, f"{getattr(fn, '__qualname__', fn)!r} must take no arguments") from None
    except ValueError:   # a builtin without a signature: taken as it is
        pass
    site = declaration_site(fn)
    if any(hook is fn or (site is not None and declaration_site(hook) == site) for hook in hooks):
        return
    hooks.append(fn)


__all__ = ["WorkerHook", "on_worker_start", "on_worker_stop"]
