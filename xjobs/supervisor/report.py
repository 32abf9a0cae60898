"""What the supervisor says about itself: ``xjobsd status``, the ``/metrics`` snapshot, the
one-line sd_notify status, and whether its loop is healthy (watchdog) and it is ready (``/readyz``).

All of it is read from the arbiter and its collaborators on the loop thread; the metrics
thread only ever sees the finished, immutable snapshot, which ``Publisher`` hands it (and
systemd its status line and watchdog) at most every ``PUBLISH_EVERY_S`` while running.

Nothing here knows a role by its name: a per-queue role's children are counted per queue
(processes, concurrency, in flight), a singleton's are not, and gauges are those the roles'
policies declare.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..workers.telemetry import Histogram
from .metrics import MetricsSnapshot
from .tally import Duration, QueueCount, Restarts, Settled, SlotCounter, Steps

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .arbiter import Arbiter
    from .metrics import MetricsEndpoint
    from .notify import Notifier
    from .slots import Child, Slot

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` from ``/proc`` (Linux); None where unknown."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _child_row(arbiter: "Arbiter", child: "Child", now: float, state: str | None = None) -> dict[str, Any]:
    slot = child.slot
    role, queue, index = slot.key
    return {
        "role": role, "queue": queue, "index": index, "pid": child.pid,
        "identity": child.identity,
        "state": state or ("retiring" if child.retiring and child.state == "ready" else child.state),
        "in_flight": child.in_flight,
        "completed": _completed(arbiter, role, queue, index),
        "restarts": slot.restarts,
        "uptime": round(now - child.started_at, 3),
        "heartbeat_age": round(now - child.last_seen, 3),
        "crash_loop": slot.crash_loop,
        "last_exit": slot.last_exit,
        "retiring": child.retiring,
        "concurrency": slot.spec.concurrency if slot.spec.policy.per_queue else None,
        # from its last heartbeat's record: the runs worth naming, its figures in this life (a
        # worker's claims and sweeps, the scheduler's leadership, the relay's publishes), its
        # limits, and the line describing it
        **child.stats.status(),
    }


def _completed(arbiter: "Arbiter", role: str, queue: str | None, index: int) -> int:
    return int(arbiter.tally.get(SlotCounter(role, queue or "", index, "completed")))


def _empty_row(arbiter: "Arbiter", slot: "Slot", now: float) -> dict[str, Any]:
    role, queue, index = slot.key
    return {
        "role": role, "queue": queue, "index": index, "pid": None, "identity": None,
        "state": "crash-loop" if slot.crash_loop else "backoff" if slot.restarts else "pending",
        "in_flight": 0,
        "completed": _completed(arbiter, role, queue, index),
        "restarts": slot.restarts, "uptime": 0.0, "heartbeat_age": None,
        "crash_loop": slot.crash_loop, "last_exit": slot.last_exit, "retiring": None,
        "restart_in": round(max(0.0, slot.next_start - now), 3),
        "concurrency": slot.spec.concurrency if slot.spec.policy.per_queue else None,
    }


def children(arbiter: "Arbiter", now: float) -> list[dict[str, Any]]:
    table = arbiter.processes
    rows = []
    for slot in sorted(table.slots, key=lambda s: (s.spec.role, s.spec.queue or "", s.index)):
        if slot.child is None and slot.successor is None:
            if arbiter.state == "running":
                rows.append(_empty_row(arbiter, slot, now))
            continue
        for child in slot.children():
            rows.append(_child_row(arbiter, child, now,
                                   "starting" if child is slot.successor and child.state != "ready" else None))
    for child in table.retired:
        if child.exit_code is None:
            rows.append(_child_row(arbiter, child, now, "draining" if child.state == "ready" else None))
    return rows


def served_queues(arbiter: "Arbiter") -> list[str]:
    """The queues a per-queue group of this daemon serves (even at 0 processes)."""
    return sorted({spec.queue for spec in arbiter.processes.specs.values()
                   if spec.policy.per_queue and spec.queue})


def queues(arbiter: "Arbiter", now: float) -> dict[str, dict[str, Any]]:
    summary = arbiter.summary
    table = arbiter.processes
    names = set(served_queues(arbiter))
    if summary is not None:
        names |= set(summary.queues) | set(summary.states)
    out = {}
    for name in sorted(names):
        slots = [s for s in table.slots if s.spec.policy.per_queue and s.spec.queue == name]
        specs = [spec for spec in table.specs.values() if spec.policy.per_queue and spec.queue == name]
        row = summary.queues.get(name, {"depth": 0, "oldest_ready_seconds": 0.0}) if summary else {}
        out[name] = {
            "depth": row.get("depth"),
            "oldest_ready_seconds": row.get("oldest_ready_seconds"),
            "processes": len(slots),
            "concurrency": max((spec.concurrency for spec in specs), default=0),
            "in_flight": sum(c.in_flight for s in slots for c in s.children()),
            "states": dict(summary.states.get(name, {})) if summary else {},
            "quarantined": summary.states.get(name, {}).get("quarantined", 0) if summary else 0,
            "unknown_jobs": summary.unknown.get(name, 0) if summary else 0,
            "waiting": dict(summary.waiting.get(name, {})) if summary else {},
            "paused": name in summary.paused if summary else None,
            "as_of_seconds": round(now - summary.at, 3) if summary else None,
        }
    return out


def status(arbiter: "Arbiter", now: float) -> dict[str, Any]:
    deadline = arbiter.drain.deadline
    return {
        "pid": arbiter.pid,
        "apps": list(arbiter.settings.apps),
        "cwd": os.getcwd(),   # where its app was imported from, and its record kept
        "state": arbiter.state,
        "uptime": round(now - arbiter.started_at, 3),
        "schema": arbiter.settings.schema,
        "database_up": arbiter.database_up,
        "metrics": arbiter.metrics.address if arbiter.metrics is not None else None,
        "control": arbiter.control.path if arbiter.control is not None else None,
        "drain_deadline_in": round(max(0.0, deadline - now), 3) if deadline is not None else None,
        "reload": arbiter.reloader.state(),
        "children": children(arbiter, now),
        "queues": queues(arbiter, now),
        "unserved_jobs": arbiter.reshaper.unserved(),
        "outbox": ({"pending": arbiter.summary.outbox_pending,
                    "oldest_seconds": round(arbiter.summary.outbox_oldest_seconds, 3)}
                   if arbiter.summary is not None else None),
    }


def not_ready(arbiter: "Arbiter") -> str | None:
    """Why ``/readyz`` answers 503, or None when ready."""
    if arbiter.state != "running":
        return arbiter.state
    down = [s.label for s in arbiter.processes.slots if s.child is None or s.child.state != "ready"]
    if down:
        return f"child not ready: {', '.join(down[:5])}"
    if not arbiter.database_up:
        return "database unreachable" if arbiter.database_up is False else "database not checked yet"
    return None


def loop_healthy(arbiter: "Arbiter") -> bool:
    """Whether the supervisor itself is sound (the watchdog's question). A slot in a crash loop
    is not a reason to say no: it is reported, and restarting the daemon would not mend it."""
    return arbiter.state in ("starting", "running", "draining", "killing")


def jobs_in_flight(children: "Iterable[Child]") -> int:
    """Jobs running in these children: a per-queue role's ``in_flight`` counts runs of its
    queue; a singleton's is its own work (a round, a batch), not jobs."""
    return sum(c.in_flight for c in children if c.policy.per_queue)


def status_line(arbiter: "Arbiter") -> str:
    slots = arbiter.processes.slots
    kids = [c for s in slots for c in s.children()]
    ready = sum(1 for c in kids if c.state == "ready")
    in_flight = jobs_in_flight(kids)
    line = f"{arbiter.state}: {ready}/{len(slots)} children ready, {in_flight} job(s) in flight"
    if arbiter.summary is not None and arbiter.summary.queues:
        depth = ", ".join(f"{q}={v['depth']}" for q, v in sorted(arbiter.summary.queues.items()))
        line += f", ready depth {depth}"
    crash = [s.label for s in slots if s.crash_loop]
    if crash:
        line += f"; CRASH LOOP: {', '.join(crash[:3])}"
    return line


def snapshot(arbiter: "Arbiter", now: float) -> MetricsSnapshot:
    """Everything ``/metrics``, ``/healthz`` and ``/readyz`` read, built on the loop thread."""
    tally = arbiter.tally
    table = arbiter.processes
    durations: dict[tuple[str, str], Histogram] = {}
    for part, n in tally.items(Duration):
        hist = durations.setdefault((part.queue, part.job), Histogram())
        if part.part == "sum":
            hist.sum = n
        elif part.part == "count":
            hist.count = n
        elif part.part < len(hist.buckets):
            hist.buckets[part.part] = n
    in_flight: dict[str, float] = {}
    children_by_state: dict[tuple[str, str], int] = {}
    role_gauges: dict[str, tuple[str, float]] = {}   # family -> (help, largest value reported)
    for child in table.live():
        policy = child.policy
        if policy.per_queue and child.queue is not None:
            in_flight[child.queue] = in_flight.get(child.queue, 0) + child.in_flight
        key = (child.role, child.state)
        children_by_state[key] = children_by_state.get(key, 0) + 1
        for gauge in policy.gauges:
            value = getattr(child.stats, gauge.stat, None)   # a field of the role's record
            if isinstance(value, (int, float)):   # a flag too; a child that has not said yet adds nothing
                known = role_gauges.get(gauge.family)
                role_gauges[gauge.family] = (gauge.help, max(float(value), known[1]) if known else float(value))
    # every role this daemon runs has a restart count, 0 until it restarts
    restarts: dict[str, float] = {spec.role: 0 for spec in table.specs.values()}
    restarts.update({key.role: n for key, n in tally.items(Restarts)})
    per_queue: dict[str, dict[str, float]] = {"claim_failed": {}, "lease_lost": {}, "released": {}}
    for count, n in tally.items(QueueCount):
        per_queue[count.name][count.queue] = n
    summary = arbiter.summary
    figures = summary.queues if summary is not None else {}
    return MetricsSnapshot(
        alive_at=now,
        not_ready=not_ready(arbiter),
        queues=served_queues(arbiter),
        depth={q: row.get("depth", 0) for q, row in figures.items()},
        oldest_ready_seconds={q: row.get("oldest_ready_seconds", 0.0) for q, row in figures.items()},
        states=summary.states if summary is not None else {},
        unknown=summary.unknown if summary is not None else {},
        waiting=summary.waiting if summary is not None else {},
        paused=sorted(summary.paused) if summary is not None else [],
        outbox=(summary.outbox_pending, summary.outbox_oldest_seconds) if summary is not None else None,
        jobs={(key.queue, key.job, key.outcome): n for key, n in tally.items(Settled)},
        durations=durations,
        steps={(key.queue, key.kind): n for key, n in tally.items(Steps)},
        claim_failed=per_queue["claim_failed"],
        lease_lost=per_queue["lease_lost"],
        released=per_queue["released"],
        in_flight=in_flight,
        restarts=restarts,
        crash_loop={(s.spec.role, s.spec.queue or ""): int(s.crash_loop) for s in table.slots},
        children=children_by_state,
        role_gauges=role_gauges,
        database_up=bool(arbiter.database_up),
    )


PUBLISH_EVERY_S = 0.25
_STATUS_LINE_EVERY_S = 2.0


class Publisher:
    """Hands the snapshot to ``/metrics`` and the status line and watchdog to systemd, each at
    its own pace; a daemon that is not running publishes on every pass (a drain is short)."""

    def __init__(self, metrics: "MetricsEndpoint | None", notifier: "Notifier") -> None:
        self.metrics = metrics
        self.notifier = notifier
        self._next_publish = 0.0
        self._next_watchdog = 0.0
        self._next_status_line = 0.0
        self._last_status_line = ""

    def publish(self, arbiter: "Arbiter", now: float) -> None:
        if now < self._next_publish and arbiter.state == "running":
            return
        self._next_publish = now + PUBLISH_EVERY_S
        if self.metrics is not None:
            self.metrics.publish(snapshot(arbiter, now))
        notifier = self.notifier
        if not notifier.enabled:
            return
        if now >= self._next_status_line:
            self._next_status_line = now + _STATUS_LINE_EVERY_S
            line = status_line(arbiter)
            if line != self._last_status_line:
                self._last_status_line = line
                notifier.status(line)
        watchdog_s = notifier.watchdog_s
        if watchdog_s and now >= self._next_watchdog and loop_healthy(arbiter):
            self._next_watchdog = now + watchdog_s / 2.0
            notifier.watchdog()
