"""``xjobs.on_error(fn)``: hand every failed attempt to the app's error reporting (Sentry,
a pager, a metrics pipeline), with the retry verdict that decided its fate::

    @xjobs.on_error
    def report(ctx, error, verdict):
        sentry_sdk.capture_exception(error, tags={"job": ctx.name, "dead": verdict.dead})

``fn(ctx, error, verdict)`` is called for each attempt that failed and was settled as retried
or dead (``verdict`` is a ``RetryVerdict``: ``dead``, ``delay_ms``, ``reason``), timeouts
included. It runs on a thread of its own, never on the worker's loop, so a slow reporter
delays nothing but itself; what it raises is logged and dropped. A worker that closes gives
the reports still queued a short while to go out.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .errors import InvalidOption

if TYPE_CHECKING:
    from .context import Ctx
    from .registry import Registry
    from .retry import RetryVerdict

ErrorHook = Callable[["Ctx", BaseException, "RetryVerdict"], Any]

log = logging.getLogger("xjobs.worker")
_BACKLOG = 10_000      # reports waiting beyond this are dropped (and counted), never buffered without end


def on_error(fn: ErrorHook, *, registry: "Registry | None" = None) -> ErrorHook:
    """Register ``fn(ctx, error, verdict)`` for every failed attempt of the app's jobs."""
    from .registry import REGISTRY
    if not callable(fn):
        raise InvalidOption("on_error", "takes a callable: (ctx, error, verdict) -> None")
    (registry if registry is not None else REGISTRY).error_hooks.append(fn)
    return fn


class Reporter:
    """The worker's side: ``report`` from the loop thread, the hooks called on another."""

    def __init__(self, hooks: Sequence[ErrorHook], identity: str) -> None:
        self._hooks = tuple(hooks)
        self._identity = identity
        self._queue: queue.Queue[tuple[Ctx, BaseException, RetryVerdict] | None] = queue.Queue(_BACKLOG)
        self._thread: threading.Thread | None = None
        self.dropped = 0

    def report(self, ctx: "Ctx", error: BaseException, verdict: "RetryVerdict") -> None:
        if not self._hooks:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=f"xjobs-report-{self._identity}",
                                            daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait((ctx, error, verdict))
        except queue.Full:
            self.dropped += 1

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            ctx, error, verdict = item
            for hook in self._hooks:
                try:
                    hook(ctx, error, verdict)
                except Exception as exc:   # a broken reporter must not take anything else down
                    log.warning("worker %s: on_error hook %r failed: %s", self._identity,
                                getattr(hook, "__qualname__", hook), exc)

    def close(self, timeout_s: float = 2.0) -> None:
        """Let what is queued go out, for at most ``timeout_s``."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)


__all__ = ["ErrorHook", "Reporter", "on_error"]
