"""The supervisor's only database work, done in one thread on short-lived connections.

Two jobs share it:

* **statistics** — once per interval, ONE round of ``queue_summary`` and ``queue_counts`` for the
  whole daemon (never one per child): queue depth, oldest-ready age, jobs per state and the
  jobs that wait, by reason (``queue_waiting``), for
  ``/metrics`` and ``xjobsd status``; a round that fails marks the database unreachable
  (``/readyz`` answers 503).
* **hand-backs** — when a child whose role hands back jobs (``RolePolicy.hands_back_jobs``: the
  workers) died, its running jobs go back to ready at once
  (``job_release_worker``, fenced on the dead child's identity) instead of waiting a lease
  window; but only after ``session_count(identity)`` is 0, so no statement of the dead child
  is still running on the server when its jobs change hands. A hand-back that cannot happen
  before the lease would have lapsed anyway is given up: the lease is the safety net. For a
  child that CRASHED, a job running alone is charged its attempt (and dead-lettered on its
  last, with a verdict naming the crash) while jobs running together become suspects that run
  alone next; a child the supervisor retired gives every attempt back.

  ``session_count`` sees the driver's own sessions (named by the identity) and every other
  libpq connection the child opened without naming itself: the child sets ``PGAPPNAME`` to
  its identity right after the fork. It cannot see a connection that sets its own
  ``application_name``, one opened by a client library that ignores ``PGAPPNAME``, or work the
  child handed to another process or server: a statement still running there may land after
  the job was handed back (at-least-once, as after a lease lapse).

No connection may cross a fork, so every round opens its connection after taking
``fork_lock`` and closes it before letting go (a child finalising an inherited connection
would end the parent's session); the arbiter forks only while it holds the lock and never
waits for it: a busy round defers a start by a loop pass. A round is therefore bounded: a
short connect timeout, a short wait for the pool, and a server-side ``statement_timeout`` on
every statement, so a locked table or a stalled server delays a restart by seconds at most;
and between two rounds the lock stays free for a moment, so a waiting fork always gets in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from ..config import Settings
from ..drivers.base import JobDriver, Released, WorkerExit

log = logging.getLogger("xjobs.supervisor.probe")

_CONNECT_TIMEOUT_S = 2
_STATEMENT_TIMEOUT_MS = 2000
_RELEASE_RETRY_S = 0.05
_DOWN_RETRY_S = 1.0          # while the server is away, hand-backs retry at this pace
_FORK_GAP_S = 0.1            # fork_lock stays free this long after a round (the arbiter retries every 20 ms)


@dataclass
class _Release:
    identity: str
    queue: str | None
    give_up_at: float
    crashed: bool = True
    how: str = "died"
    charge: str = "alone"


@dataclass(frozen=True)
class Summary:
    at: float                                   # time.monotonic() of the round
    queues: dict[str, dict[str, float]]         # queue -> {"depth", "oldest_ready_seconds"}
    states: dict[str, dict[str, int]]           # queue -> state -> count (and "quarantined")
    paused: frozenset[str] = frozenset()        # queues paused fleet-wide (xjobsd queues pause)
    outbox_pending: int = 0                     # outbox rows not yet published, fleet-wide
    outbox_oldest_seconds: float = 0.0          # age of the oldest of them
    unknown: dict[str, int] = field(default_factory=dict)   # queue -> ready jobs no worker has a body for
    waiting: dict[str, dict[str, int]] = field(default_factory=dict)   # queue -> reason -> jobs that wait


@dataclass(frozen=True)
class HandedBack:
    """A dead child's running jobs went back (none, when it held nothing)."""
    identity: str
    queue: str | None
    released: list[Released]


@dataclass(frozen=True)
class Abandoned:
    """A dead child's sessions outlived the lease window: its jobs are left to the lease."""
    identity: str
    queue: str | None


@dataclass(frozen=True)
class Unreachable:
    """A round that failed: the database is away."""
    error: str


ProbeResult = Summary | HandedBack | Abandoned | Unreachable


class Probe(Protocol):
    """What the arbiter and its process table ask of a probe (``DatabaseProbe``, or a stand-in
    for tests of the loop alone)."""

    @property
    def reachable(self) -> bool | None: ...
    @property
    def pending_releases(self) -> int: ...
    def start(self) -> None: ...
    def stop(self, timeout_s: float = ...) -> None: ...
    def request_release(self, identity: str, queue: str | None, within_s: float, *,
                        crashed: bool = True, how: str = "died", charge: str = "alone") -> None: ...
    def flush_releases(self, timeout_s: float) -> None: ...
    def results(self) -> list[ProbeResult]: ...


def default_driver_factory(settings: Settings) -> Callable[[], JobDriver]:
    def make() -> JobDriver:
        from psycopg.conninfo import make_conninfo
        from ..drivers.postgres import PostgresDriver
        dsn = make_conninfo(settings.dsn or "", connect_timeout=_CONNECT_TIMEOUT_S)
        return PostgresDriver(dsn, schema=settings.schema, pool_size=1,
                              pool_timeout=_CONNECT_TIMEOUT_S + 1.0,
                              statement_timeout_ms=_STATEMENT_TIMEOUT_MS,
                              application_name="xjobsd-supervisor")
    return make


class DatabaseProbe:
    def __init__(self, make_driver: Callable[[], JobDriver], *, interval_s: float,
                 fork_lock: threading.Lock, wake: Callable[[], None],
                 names: Callable[[], Sequence[str]] | None = None) -> None:
        """``names``: the job names the daemon's code declares now (after a reload too); ready
        jobs of other names are counted as unknown."""
        self._make_driver = make_driver
        self._names = names
        self.interval_s = interval_s
        self._fork_lock = fork_lock
        self._wake = wake
        self._event = threading.Event()
        self._stopping = False
        self._releases: deque[_Release] = deque()
        self._results: deque[ProbeResult] = deque()
        self._thread: threading.Thread | None = None
        self._next_stats = 0.0
        self._lock_free_at = 0.0
        self.reachable: bool | None = None

    # -- the arbiter's side (main thread) -------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="xjobsd-probe", daemon=True)
        self._thread.start()

    def request_release(self, identity: str, queue: str | None, within_s: float, *,
                        crashed: bool = True, how: str = "died", charge: str = "alone") -> None:
        self._releases.append(_Release(identity, queue, time.monotonic() + within_s, crashed, how, charge))
        self._event.set()

    def results(self) -> list[ProbeResult]:
        """What finished since the last call, in order: a statistics round's ``Summary``, a
        child's ``HandedBack`` or ``Abandoned``, an ``Unreachable`` round."""
        out: list[ProbeResult] = []
        while self._results:
            out.append(self._results.popleft())
        return out

    @property
    def pending_releases(self) -> int:
        return len(self._releases)

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stopping = True
        self._event.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def flush_releases(self, timeout_s: float) -> None:
        """At shutdown: let pending hand-backs finish, up to ``timeout_s``."""
        end = time.monotonic() + timeout_s
        self._event.set()
        while self._releases and time.monotonic() < end and self._thread is not None \
                and self._thread.is_alive():
            time.sleep(0.01)

    # -- the thread --------------------------------------------------------------------------------

    def _emit(self, result: ProbeResult) -> None:
        self._results.append(result)
        self._wake()

    def _run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            wait = self._next_stats - now
            if self._releases:
                retry = _RELEASE_RETRY_S if self.reachable is not False else _DOWN_RETRY_S
                wait = min(wait, retry)
            wait = max(wait, self._lock_free_at - now)
            if wait > 0:
                self._event.wait(wait)
                self._event.clear()
            if self._stopping:
                return
            now = time.monotonic()
            if now < self._lock_free_at:
                continue
            stats_due = now >= self._next_stats
            if not stats_due and not self._releases:
                continue
            self._round(stats_due)
            now = time.monotonic()
            self._lock_free_at = now + _FORK_GAP_S
            if stats_due:   # counted from the end of the round: a slow round is not repeated at once
                self._next_stats = now + self.interval_s

    def _round(self, stats_due: bool) -> None:
        with self._fork_lock:
            driver: JobDriver | None = None
            try:
                driver = self._make_driver()
                driver.ping(_CONNECT_TIMEOUT_S)   # fail fast when the server is away
                self._hand_back(driver)
                if stats_due:
                    self._statistics(driver)
                self._set_reachable(True, None)
            except Exception as exc:
                self._set_reachable(False, exc)
            finally:
                if driver is not None:
                    try:
                        driver.close()
                    except Exception:
                        pass

    def _hand_back(self, driver: JobDriver) -> None:
        for item in list(self._releases):
            if driver.session_count(item.identity) > 0:
                if time.monotonic() >= item.give_up_at:
                    self._releases.remove(item)
                    self._emit(Abandoned(item.identity, item.queue))
                continue   # its backend is still finishing a statement: next round
            released = driver.job_release_worker(WorkerExit(item.identity, crashed=item.crashed, how=item.how,
                                                            charge=item.charge))
            self._releases.remove(item)
            self._emit(HandedBack(item.identity, item.queue, released))

    def _statistics(self, driver: JobDriver) -> None:
        summary = driver.queue_summary()
        states = driver.queue_counts()   # never a scan of the finished bulk
        paused = frozenset(c.name for c in driver.queue_control() if c.paused)
        outbox = driver.outbox_summary()       # outbox_pending_idx: the unpublished rows only
        unknown = driver.queue_unknown(list(self._names())) if self._names is not None else {}
        waiting = driver.queue_waiting()       # the key-waiting and ready indexes, never the finished bulk
        queues = {name: {"depth": s.depth, "oldest_ready_seconds": s.oldest_ready_ms / 1000.0}
                  for name, s in summary.items()}
        self._emit(Summary(time.monotonic(), queues, states, paused, outbox.pending,
                           outbox.oldest_ms / 1000.0, unknown, waiting))

    def _set_reachable(self, ok: bool, exc: Exception | None) -> None:
        if ok != self.reachable:
            if ok:
                log.info("database reachable")
            else:
                log.error("database unreachable: %s", exc)
                self._emit(Unreachable(str(exc)))
        self.reachable = ok


class _NullProbe:
    """Stands in when a supervisor has no database to ask (tests of the loop alone)."""

    reachable: bool | None = None
    pending_releases = 0

    def start(self) -> None: ...
    def stop(self, timeout_s: float = 0) -> None: ...
    def request_release(self, identity: str, queue: str | None, within_s: float, *,
                        crashed: bool = True, how: str = "died", charge: str = "alone") -> None: ...
    def flush_releases(self, timeout_s: float) -> None: ...
    def results(self) -> list[ProbeResult]: return []


def no_probe(**_: Any) -> Probe:
    return _NullProbe()
