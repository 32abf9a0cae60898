"""Forking one child: the one place the supervisor calls ``fork``.

The process table asks (``processes.py``); this owns how:

* under ``fork_lock``, never waited for: the probe holds it whenever it has a database
  connection open (a child finalising a copied psycopg connection would end the parent's
  session), so a busy lock DEFERS the start by a loop pass (``deferred``) instead of blocking;
* with the supervisor's signals blocked until the child has its own handlers: a signal meant
  for the new child must never run the parent's handler, which would report it to the parent;
* over a fresh socketpair: the child keeps its end, the parent the other; in the child,
  ``after_fork`` first closes every supervisor fd it inherited (other children's pipes,
  listeners, the signal fd), then the child hosts its role (``child.py``);
* with the garbage collector's objects frozen across the fork (``gc.freeze``): a collection
  in the child writes the header of every object it examines, so the pages a child inherited
  would turn private one by one as it works (a worker that ran 20,000 jobs held 23 MiB of its
  own instead of 12). The child keeps them frozen; the supervisor unfreezes at once, so its
  own cyclic garbage is still collected.

A failed fork, or no fd left for its pipe, raises ``OSError``: the table backs the slot off as
after a failed start.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable

import multiprocess

from .child import FORK_BLOCKED_SIGNALS, ChildSpec, child_main
from .framing import pair
from .slots import RoleSpec, new_identity


@dataclass(frozen=True)
class Forked:
    identity: str
    proc: Any                   # a multiprocess Process (fork context)
    sock: socket.socket         # the parent's end of the child's pipe


class Forker:
    def __init__(self, fork_lock: threading.Lock, after_fork: Callable[[socket.socket], None]) -> None:
        self.fork_lock = fork_lock
        self.after_fork = after_fork    # in the child, with its own parent end: close the rest
        self.pid = os.getpid()
        self.deferred = False           # a start waited for the probe's round; retry soon
        self._context = multiprocess.get_context("fork")

    def fork(self, spec: RoleSpec, index: int, *, heartbeat_ms: float,
             drain_deadline_ms: float, app: str = "") -> Forked | None:
        """Start one process of ``spec`` as slot ``index``; None when deferred."""
        if not self.fork_lock.acquire(blocking=False):
            self.deferred = True
            return None
        identity = new_identity(spec.role)
        child_spec = ChildSpec(role=spec.role, queue=spec.queue, index=index, identity=identity,
                               parent_pid=self.pid, heartbeat_ms=heartbeat_ms,
                               drain_deadline_ms=drain_deadline_ms, drain=spec.policy.drain, app=app)
        parent_end: socket.socket | None = None
        child_end: socket.socket | None = None
        mask = None
        try:
            parent_end, child_end = pair()
            own_end = parent_end
            proc = self._context.Process(
                target=child_main, name=child_spec.title,
                args=(child_end, child_spec, spec.make, lambda: self.after_fork(own_end)))
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORK_BLOCKED_SIGNALS)
            gc.freeze()
            try:
                proc.start()   # the child unblocks them once its own handlers are in place
            finally:
                gc.unfreeze()   # in the supervisor only: the child never returns from start()
        except OSError:
            if parent_end is not None:
                parent_end.close()
            raise
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self.fork_lock.release()
            if child_end is not None:
                child_end.close()
        return Forked(identity, proc, parent_end)
