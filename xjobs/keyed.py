"""Concurrency by key: ``job(concurrency=N, concurrency_key=fn, ordered=False, on_failure=None)``.

At most N runs of one job per key at once, across every machine: the key is ``fn(input)``,
computed at enqueue and stored with the job (``jobs.concurrency_key``); the database lets
the members of a key in, in enqueue order, while fewer than N hold a place (migration 14).
``ordered=True`` (with ``concurrency=1``) makes the key a sequence: one member at a time, in
enqueue order, the next let in when the one before settles. A member that dies either keeps
the sequence's place until it is retried or cancelled (``on_failure="hold"``, the default)
or lets the next one in (``"skip"``). Without ``ordered`` a dead member always lets its
place go.

This module holds the declaration's refusals and the key of one input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from .errors import ConcurrencyKeyInvalid, InvalidOption
from .options import finite_count

MAX_KEY_CHARS = 256          # a key is an index entry and a lock name: short
ON_FAILURE = ("hold", "skip")
OnFailure = Literal["hold", "skip"]


@dataclass(frozen=True, slots=True)
class KeyedConcurrency:
    """What a job declared about its key: ``cap`` members at once per ``key(input)``;
    ``ordered``: a sequence; ``on_failure``: what a dead member of a sequence does (None
    when not ordered: a dead member lets its place go)."""

    cap: int
    key: Callable[[Any], Any]
    ordered: bool = False
    on_failure: OnFailure | None = None

    @property
    def hold(self) -> bool:
        """Whether a dead member keeps its key's place."""
        return self.on_failure == "hold"

    def key_for(self, job: str, input: Any) -> str:
        """The key of one input; refused with ``X_JOB_CONCURRENCY_KEY_INVALID``."""
        try:
            key = self.key(input)
        except Exception as exc:
            raise ConcurrencyKeyInvalid(f"job {job!r}: concurrency_key(input) raised "
                                        f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or "\x00" in key:
            shown = repr(key) if len(repr(key)) <= 80 else repr(key)[:77] + "..."
            raise ConcurrencyKeyInvalid(f"job {job!r}: concurrency_key(input) must return a non-empty string "
                                        f"of at most {MAX_KEY_CHARS} characters without NUL, got {shown}")
        return key

    def describe(self) -> dict[str, Any]:
        """As the manifest and ``jobs show`` print it."""
        fn = self.key
        return {"concurrency": self.cap,
                "key": f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}",
                "ordered": self.ordered, "on_failure": self.on_failure}


def declare(concurrency: int | None, concurrency_key: Any, ordered: object,
            on_failure: object) -> KeyedConcurrency | None:
    """``job()``'s refusals of the keyed options, at declaration; None: the job is not keyed
    (``concurrency`` alone is the job's fleet-wide cap, ``concurrency.md``)."""
    if not isinstance(ordered, bool):
        raise InvalidOption("ordered", f"must be True or False, got {ordered!r}")
    if concurrency_key is None:
        if ordered:
            raise InvalidOption("ordered", "a sequence is per key: give concurrency_key=lambda i: ... too")
        if on_failure is not None:
            raise InvalidOption("on_failure", "is for a sequence: give concurrency_key and ordered=True too")
        return None
    if not callable(concurrency_key):
        raise InvalidOption("concurrency_key", "must be a callable taking the input and returning a string")
    if concurrency is None:
        raise InvalidOption("concurrency_key", "needs concurrency=N: how many runs of one key at once")
    cap = finite_count(concurrency, "concurrency", minimum=1, maximum=1_000_000)
    if ordered and cap != 1:
        raise InvalidOption("ordered", f"a sequence runs one member at a time: concurrency must be 1, got {cap}")
    if on_failure is not None and not ordered:
        raise InvalidOption("on_failure", "is for a sequence (ordered=True); a dead member of an unordered "
                            "key always lets its place go")
    if on_failure is not None and on_failure not in ON_FAILURE:
        raise InvalidOption("on_failure", f"must be \"hold\" or \"skip\", got {on_failure!r}")
    chosen: OnFailure | None = None
    if ordered:
        chosen = "skip" if on_failure == "skip" else "hold"
    return KeyedConcurrency(cap, concurrency_key, ordered, chosen)
