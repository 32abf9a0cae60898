"""Per-process limits on what a worker process runs at once: a fast local gate, NOT a fleet
ceiling (``job(concurrency=N)`` is the fleet-wide one, enforced by slot rows in the database).

Ceilings, each for ONE worker process (two processes with ``tenant=2`` may run four of a
tenant's jobs between them): jobs in flight in all (``global``), per queue (``queue``), per
tenant (``tenant``), and job starts per tenant within a sliding window (``tenant_rate`` per
``tenant_rate_window``). Every number is checked finite and at least 0 when the limits are
built; 0 is a hard stop, an omitted ceiling is unlimited.

The worker asks before it claims, so it takes only what it could start: ``room(queue)`` caps
a claim by the global and queue ceilings, and ``blocked_tenants(now)`` names the tenants at
their in-flight ceiling or with a full rate window, whose jobs the claim leaves where they
are, and ``tenant_room(now)`` gives the claim both, with how many of each tenant may still
start. A claimed job still over a ceiling (a rate window filling up within a batch) is SHED by
the worker: back to ready in its place in line, no attempt burned, no ``last_error``, counted as
``outcome="shed"``; the next claim skips its tenant until it has room, so a shed does not
spin, and it stays in the queue's depth and oldest-ready age meanwhile.

The ceilings themselves are a setting (``xjobs/limits.py``); this module is the gate that
applies them. Per-tenant state stays bounded: a tenant whose counters fall to zero is forgotten, spent rate
windows are swept once per window, and at most ``max_tenants`` tenants are tracked for the
rate window; past that the LEAST throttled is evicted first (the one with the fewest refusals:
losing its window costs the least fairness). ``snapshot()`` shows the configured ceilings and
current sizes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from ..drivers.records import TenantRoom
from ..limits import Limits


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    retry_after_ms: float = 0.0
    reason: str | None = None


ADMITTED = Decision(True)


class Limiter:
    """One worker process's gate. Not thread-safe: the worker's loop thread owns it."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._global = 0
        self._queues: dict[str, int] = {}
        self._tenants: dict[str, int] = {}              # in flight, zero entries deleted
        self._starts: dict[str, deque[float]] = {}       # start times within the rate window
        self._refusals: dict[str, int] = {}              # how throttled each tracked tenant is
        self._next_sweep = 0.0

    def admit(self, tenant: str | None, queue: str, now_ms: float, *, retry_ms: float) -> Decision:
        """Admit a claimed job (and count it in flight) or say when to try again. ``retry_ms``
        is how long an in-flight ceiling's refusal waits (those free up as runs end)."""
        limits = self.limits
        if limits.global_ is not None and self._global >= limits.global_:
            return self._refuse(tenant, retry_ms, "global")
        if limits.queue is not None and self._queues.get(queue, 0) >= limits.queue:
            return self._refuse(tenant, retry_ms, "queue")
        key = tenant or ""
        if limits.tenant is not None and self._tenants.get(key, 0) >= limits.tenant:
            return self._refuse(tenant, retry_ms, "tenant")
        if limits.tenant_rate is not None:
            self._sweep(now_ms)
            starts = self._window(key, now_ms)
            if len(starts) >= limits.tenant_rate:
                wait = (starts[0] + limits.tenant_rate_window_ms - now_ms) if starts else retry_ms
                return self._refuse(tenant, max(wait, 1.0), "tenant_rate")
            self._track(key, now_ms).append(now_ms)
        self._global += 1
        self._queues[queue] = self._queues.get(queue, 0) + 1
        self._tenants[key] = self._tenants.get(key, 0) + 1
        return ADMITTED

    def room(self, queue: str) -> int | None:
        """How many more jobs of ``queue`` this process may start now by the ceilings that do
        not depend on the job (None: no such ceiling). A zero tenant ceiling or rate admits
        nobody, so it leaves no room either: 0 is a hard stop, and nothing is claimed to be shed."""
        limits = self.limits
        if limits.tenant == 0 or limits.tenant_rate == 0:
            return 0
        rooms = []
        if limits.global_ is not None:
            rooms.append(limits.global_ - self._global)
        if limits.queue is not None:
            rooms.append(limits.queue - self._queues.get(queue, 0))
        return max(0, min(rooms)) if rooms else None

    def tenant_room(self, now_ms: float) -> TenantRoom | None:
        """The claim filter of the tenant ceilings (None when there are none)."""
        limits = self.limits
        if limits.tenant is None and limits.tenant_rate is None:
            return None
        held = dict(self._tenants) if limits.tenant is not None else {}
        return TenantRoom(limits.tenant, held, tuple(self.blocked_tenants(now_ms)))

    def blocked_tenants(self, now_ms: float) -> list[str]:
        """Tenants none of whose jobs this process may start now: at their in-flight ceiling,
        or with a full rate window (``""`` stands for jobs without a tenant)."""
        limits = self.limits
        blocked: set[str] = set()
        if limits.tenant is not None:
            blocked.update(key for key, n in self._tenants.items() if n >= limits.tenant)
        if limits.tenant_rate is not None:
            self._sweep(now_ms)
            rate = limits.tenant_rate
            blocked.update(key for key in [k for k, s in self._starts.items() if len(s) >= rate]
                           if len(self._window(key, now_ms)) >= rate)
        return sorted(blocked)

    def release(self, tenant: str | None, queue: str) -> None:
        """A run admitted by ``admit`` ended (however it ended)."""
        key = tenant or ""
        self._global = max(0, self._global - 1)
        left = self._queues.get(queue, 0) - 1
        if left > 0:
            self._queues[queue] = left
        else:
            self._queues.pop(queue, None)
        left = self._tenants.get(key, 0) - 1
        if left > 0:
            self._tenants[key] = left
        else:
            self._tenants.pop(key, None)

    def _window(self, key: str, now_ms: float) -> deque[float]:
        starts = self._starts.get(key)
        if starts is None:
            return deque()
        horizon = now_ms - self.limits.tenant_rate_window_ms
        while starts and starts[0] <= horizon:
            starts.popleft()
        if not starts:        # a zero counter is deleted, not kept
            del self._starts[key]
            self._refusals.pop(key, None)
        return starts

    def _sweep(self, now_ms: float) -> None:
        """Once per window: forget every tenant whose rate window has emptied, with its
        refusals, so neither outlives the throttling it records."""
        if now_ms < self._next_sweep:
            return
        self._next_sweep = now_ms + self.limits.tenant_rate_window_ms
        for key in list(self._starts):
            self._window(key, now_ms)

    def _track(self, key: str, now_ms: float) -> deque[float]:
        starts = self._starts.get(key)
        if starts is None:
            if len(self._starts) >= self.limits.max_tenants:
                self._evict(now_ms)
            starts = self._starts[key] = deque()
        return starts

    def _evict(self, now_ms: float) -> None:
        """Make room for one more tracked tenant: spent windows go first (for free), then the
        LEAST full window (fewest starts in it; then the fewest refusals, then the oldest).
        Forgetting a fuller window would hand its tenant a free rate reset."""
        for key in list(self._starts):
            self._window(key, now_ms)
        if len(self._starts) < self.limits.max_tenants:
            return
        victim = min(self._starts, key=lambda k: (len(self._starts[k]), self._refusals.get(k, 0),
                                                  self._starts[k][0]))
        del self._starts[victim]
        self._refusals.pop(victim, None)

    def _refuse(self, tenant: str | None, retry_after_ms: float, ceiling: str) -> Decision:
        key = tenant or ""
        if key in self._starts:
            self._refusals[key] = self._refusals.get(key, 0) + 1
        return Decision(False, retry_after_ms, ceiling)

    def snapshot(self) -> dict[str, Any]:
        """What ``xjobsd status --json`` shows: ceilings as configured (None: unlimited), and
        the current sizes of every piece of state (all bounded)."""
        config = asdict(self.limits)
        config["global"] = config.pop("global_")
        return {"scope": "per worker process", "config": config,
                "in_flight": {"global": self._global, "queues": dict(self._queues)},
                "tracked": {"tenants_in_flight": len(self._tenants), "tenants_rated": len(self._starts),
                            "refusals": len(self._refusals)}}
