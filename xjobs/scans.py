"""Idempotent scans: ``scan(name=, every=, fn=)`` is work with no queue row.

A scan is a function that finds its own work (rows past a date, a table to reconcile) and is
safe to run twice. Once per ``every``, fleet-wide, the scheduler's leader (or a tick) runs it:
the scan's last start is a watermark (``scheduler_state``, under ``scan:NAME``) moved by a
compare-and-set fenced on the leader lease BEFORE ``fn`` is called, so two daemons or two
overlapping ticks never start it twice within ``every``. It runs isolated: what it raises is
logged and counted, never passed on, and it runs again at its next interval::

    def expire_trials(ctx):
        with db() as conn:
            conn.execute("update accounts set plan = 'free' where trial_ends < now()")

    xjobs.scan(name="expire_trials", every="5m", fn=expire_trials)

``fn(ctx)`` gets a ``ScanCtx``: ``name``, ``signal`` (set by a drain or the tick's deadline),
``deadline``/``remaining()`` and ``log``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .context import RunSignal
from .errors import InvalidOption
from .options import duration_ms, plain_name

if TYPE_CHECKING:
    from .registry import Registry

_log = logging.getLogger("xjobs.scan")
SCAN_PREFIX = "scan:"          # a scan's watermark row in scheduler_state: scan:NAME


@dataclass(frozen=True)
class ScanSpec:
    name: str
    every_ms: float
    fn: str                    # where the function is written (sites.declaration_site):\n                               # what makes two declarations one scan


class ScanCtx:
    """What a scan's ``fn`` receives."""

    __slots__ = ("name", "signal", "deadline", "log")

    def __init__(self, name: str, deadline: float | None) -> None:
        self.name = name
        self.signal = RunSignal()
        self.deadline = deadline
        self.log = logging.LoggerAdapter(_log, {"scan": name})

    def remaining(self) -> float:
        return math.inf if self.deadline is None else max(0.0, self.deadline - time.time())


class ScanHandle:
    def __init__(self, spec: ScanSpec, fn: Callable[[ScanCtx], Any]) -> None:
        self.spec = spec
        self._built: object = None    # scan()'s proof, for the registry
        self.name = spec.name
        self.every_ms = spec.every_ms
        self.fn = fn

    @property
    def watermark_key(self) -> str:
        return SCAN_PREFIX + self.name

    def __repr__(self) -> str:
        return f"<scan {self.name!r} every {self.every_ms:g}ms>"


def scan(*, name: str | None = None, every: object, fn: Callable[[ScanCtx], Any] | None = None,
         registry: "Registry | None" = None) -> Any:
    """Declare a scan: ``scan(name=, every="5m", fn=f)``, or as ``@scan(every="5m")``."""
    from .registry import REGISTRY
    every_ms = duration_ms(every, "scan.every", minimum_ms=1000.0)

    def declare(function: Callable[[ScanCtx], Any]) -> ScanHandle:
        if not callable(function):
            raise InvalidOption("scan.fn", "must be a function taking the scan's ctx")
        scan_name = plain_name(name if name is not None else getattr(function, "__name__", ""), "scan.name")
        from .registry import BUILT
        from .sites import declaration_site
        site = declaration_site(function)
        spec = ScanSpec(scan_name, every_ms, f"{getattr(function, '__module__', '?')}."
                        f"{getattr(function, '__qualname__', '?')}" if site is None else "%s:%s:%d" % site)
        handle = ScanHandle(spec, function)
        handle._built = BUILT
        return (registry if registry is not None else REGISTRY)._add_scan(handle)
    return declare(fn) if fn is not None else declare


__all__ = ["SCAN_PREFIX", "ScanCtx", "ScanHandle", "ScanSpec", "scan"]
