"""Where a declaration is written: what makes two declarations of one job, hook or scan one.

A module imported twice (run as ``__main__`` and imported by name, or reached from two
``sys.path`` roots) compiles its source again, so its functions are new objects; they are
still written at the same file, name and line.
"""

from __future__ import annotations

import inspect
import os
from typing import Callable


def declaration_site(fn: Callable[..., object]) -> tuple[str, str, int] | None:
    """Where ``fn`` is written: (its source file, resolved; its qualified name; its first line).

    What makes two declarations one. A module imported twice (run as ``__main__`` and imported
    by name, or reached from two ``sys.path`` roots) compiles its source again: new function and
    code objects, even a different ``__module__``, but the same file, name and line. None for
    a callable with no code of its own (a partial, an object with ``__call__``): compared by
    identity."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return None
    return (os.path.realpath(code.co_filename), getattr(fn, "__qualname__", code.co_name),
            code.co_firstlineno)


def same_body(a: Callable[..., object], b: Callable[..., object]) -> bool:
    if a is b:
        return True
    site = declaration_site(a)
    return site is not None and site == declaration_site(b)


def written_at(fn: Callable[..., object]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


__all__ = ["declaration_site", "same_body", "written_at"]
