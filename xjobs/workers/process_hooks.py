"""Running the app's worker hooks (``xjobs.on_worker_start``/``on_worker_stop``) in one worker.

The queue worker calls ``start()`` from its ``initialize`` (after the fork, before its first
claim) and ``stop()`` from its close, after its bodies ended or were handed back and before
its event loop stops, so an async hook still has the loop its clients are bound to.

A start hook that raises is the worker's failure: the event ``worker.start_hook.failed`` is
logged and ``X_WORKER_START_FAILED`` raised, which a daemon child answers by exiting (the
supervisor restarts the slot with its crash-loop back-off). A start hook is given no deadline
of its own: a child not ready ``startup`` after its fork is killed and restarted by the
supervisor. Stop hooks share ``worker_stop_timeout``: one that raises or outlasts what is left
of it is logged (``worker.stop_hook.failed``) and the next one runs, since the close must go on
whatever a hook does. Stop hooks run only after every start hook succeeded: they let go of what
the start hooks built.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from typing import Callable, Sequence

from ..errors import WorkerStartFailed
from ..logs import event
from ..registry import Registry

log = logging.getLogger("xjobs.worker")
Hook = Callable[[], object]


def _name(hook: Hook) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


class WorkerHooks:
    """The start and stop hooks of one worker; ``loop`` answers the bodies' event loop
    (started on first use), where an async hook is awaited."""

    def __init__(self, start: Sequence[Hook], stop: Sequence[Hook], *, identity: str,
                 loop: Callable[[], asyncio.AbstractEventLoop], stop_timeout_ms: float) -> None:
        self._start = tuple(start)
        self._stop = tuple(reversed(stop))     # what was built last is let go of first
        self.identity = identity
        self._loop = loop
        self.stop_timeout_s = stop_timeout_ms / 1000.0
        self.started = False

    @classmethod
    def of(cls, registry: Registry, identity: str, loop: Callable[[], asyncio.AbstractEventLoop],
           stop_timeout_ms: float) -> "WorkerHooks":
        """The hooks ``registry`` declares, for the worker ``identity``."""
        return cls(registry.worker_start, registry.worker_stop, identity=identity, loop=loop,
                   stop_timeout_ms=stop_timeout_ms)

    def start(self) -> None:
        """Every start hook, in order; the first that raises stops the worker."""
        for hook in self._start:
            try:
                self._call(hook, None)
            except Exception as exc:
                event(log, logging.ERROR, "worker.start_hook.failed",
                      "worker %s: on_worker_start hook %s raised %s: %s", self.identity, _name(hook),
                      type(exc).__name__, exc, hook=_name(hook), error=f"{type(exc).__name__}: {exc}",
                      worker=self.identity)
                raise WorkerStartFailed(f"on_worker_start hook {_name(hook)} raised "
                                        f"{type(exc).__name__}: {exc}", hook=_name(hook)) from exc
        self.started = True

    def stop(self) -> None:
        """Every stop hook, newest first, within the shared deadline; never raises."""
        if not self.started:
            return
        self.started = False
        ends_at = time.monotonic() + self.stop_timeout_s
        for hook in self._stop:
            left = max(0.0, ends_at - time.monotonic())
            try:
                self._call(hook, left)
            except Exception as exc:
                why = (f"did not return within {self.stop_timeout_s:g}s" if isinstance(exc, TimeoutError)
                       else f"raised {type(exc).__name__}: {exc}")
                event(log, logging.WARNING, "worker.stop_hook.failed", "worker %s: on_worker_stop hook %s %s",
                      self.identity, _name(hook), why, hook=_name(hook), error=why, worker=self.identity)

    def _call(self, hook: Hook, timeout_s: float | None) -> None:
        """``hook()``; awaited on the bodies' loop when it is async. With ``timeout_s`` a hook
        still running then is left behind (a thread cannot be stopped; a task is cancelled)
        and ``TimeoutError`` raised."""
        if inspect.iscoroutinefunction(hook):
            future = asyncio.run_coroutine_threadsafe(hook(), self._loop())
            try:
                future.result(timeout_s)
            except TimeoutError:
                future.cancel()
                raise
            return
        if timeout_s is None:
            hook()
            return
        failure: list[BaseException] = []

        def target() -> None:
            try:
                hook()
            except BaseException as exc:   # carried back to the caller's thread
                failure.append(exc)
        thread = threading.Thread(target=target, name=f"xjobs-stop-hook-{self.identity}", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            raise TimeoutError(_name(hook))
        if failure:
            raise failure[0]


__all__ = ["WorkerHooks"]
