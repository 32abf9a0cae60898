"""One declaration per job name, for the jobs a factory builds.

Every body a factory makes is written in the factory's own module, so the registry, which
tells two declarations apart by where their body is written, would take two different ones
under one name for one (and keep the later). A factory's declarations are told apart by the
app's callables instead: a module imported twice hands the same ones again and is one
declaration; anything else under a name already taken is ``X_JOB_DUPLICATE``.
"""

from __future__ import annotations

from typing import Callable

from ..errors import DuplicateJob, UnknownJob
from ..registry import Registry
from ..sites import declaration_site


def one_declaration(registry: Registry, name: str, body: Callable[..., object], factory: str,
                    *callables: Callable[..., object]) -> None:
    """Mark ``body`` with what makes its declaration this one; refuse ``name`` when another
    declaration holds it (a hand-written job, another factory's, or this one's over other
    callables)."""
    sources = (factory, *(declaration_site(fn) or id(fn) for fn in callables))
    setattr(body, "_factory_sources", sources)
    try:
        existing = registry.get(name)
    except UnknownJob:
        return
    if getattr(existing.fn, "_factory_sources", None) != sources:
        raise DuplicateJob(f"two different declarations of the job name {name!r}, one of them by {factory}()")


__all__ = ["one_declaration"]
