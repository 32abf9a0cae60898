"""What a job and the queues look like from outside, projected once for every surface that
shows them: ``xjobs.get`` and ``xjobs.queues``, ``xjobsd jobs show`` and ``xjobsd queues ls``,
the dashboard. Values are plain JSON (times as ISO-8601 strings in UTC), so what the API
answers is exactly what ``--json`` prints."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Mapping, NotRequired, TypedDict

from .drivers.base import LATEST_MS, HistoryEntry, JobView, QueueStore
from .drivers.fair import FAIR_AHEAD_MOST, FairPlace
from .drivers.records import WAITING_REASONS
from .snooze import SnoozePolicy

_TIME_FIELDS = ("run_at", "created_at", "finished_at", "lease_expires_at", "at", "started_at",
                "wake_at", "until", "changed_at")


def iso(ms: float | None) -> str | None:
    """Epoch milliseconds as ISO-8601 in UTC, to the millisecond."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat(timespec="milliseconds")


def plain(value: Any) -> Any:
    """A JobView (or anything holding them) as plain JSON with ISO-8601 times."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        # a payload is the application's data, shown exactly as stored
        return {k: (v if k == "payload" else
                    iso(v) if k in _TIME_FIELDS and isinstance(v, (int, float)) else plain(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class WaitingFor(TypedDict):
    """The suspended step of a suspended job: a sleep until ``until``, or a wait for ``event``
    (of ``key``) until ``until`` (None: no timeout)."""
    step: str
    until: float | None
    sleep: NotRequired[bool]
    event: NotRequired[str | None]
    key: NotRequired[str | None]


def waiting_for(view: JobView) -> WaitingFor | None:
    """What a suspended job waits for: the sleep or the event of its suspended step."""
    if view.state != "suspended":
        return None
    for step in reversed(view.steps):
        if step.state == "sleeping":
            return {"step": step.name, "sleep": True, "until": step.wake_at}
        if step.state == "waiting":
            until = step.wake_at if step.wake_at is not None and step.wake_at < LATEST_MS else None
            return {"step": step.name, "event": step.event, "key": step.event_key or None,
                    "until": until}
    return None


def key_waiting(view: JobView) -> str | None:
    """What a member waiting for its key (``job(concurrency_key=...)``) waits for, in words: a
    sequence (one at a time) behind the member that holds it, else its key at its concurrency."""
    key = view.key
    if key is None or not key.waiting:
        return None
    if key.cap == 1 and key.holders:
        return f"sequence {key.key!r} behind job #{key.holders[0]}"
    return f"key {key.key!r} at its concurrency {key.cap}"


def why_waiting(view: JobView, now_ms: float | None = None,
                rated: Mapping[str, Any] | None = None, fair: FairPlace | None = None,
                policy: SnoozePolicy | None = None) -> str | None:
    """Why a live job that is not running waits, in words: the one sentence ``jobs show``, its
    ``--json``, ``xjobs.get``, the dashboard's job page and its API give. A member waiting for
    its key or sequence (``key_waiting``); a ready job held by its rate key (``rated``: what
    ``rate_keys.rate_waiting`` says of it), or due later (``now_ms``, the database's clock)
    because it is debounced, snoozed or was scheduled (``later_waiting``; ``policy``: its job's
    declared snoozes and debounce, when the declaration is at hand); a due job of a fair queue
    behind other keys' turns or its own key's jobs (``fair``: its ``fair_place``,
    ``fair_waiting``). None: it may run now, or it is not waiting (running, finished,
    suspended at a step: ``waiting_for`` says what that step waits for). Without ``now_ms``
    and ``rated`` only the keyed sentences can be told."""
    keyed = key_waiting(view)
    if keyed is not None or view.state != "ready":
        return keyed
    if rated is not None and rated.get("waiting_until") is not None:
        return (f"rate key {rated['key']} until {iso(rated['waiting_until'])} "
                f"({rated['started']} of {rated['cap']} started in its window)")
    if now_ms is None:
        return None
    if view.run_at > now_ms:
        return later_waiting(view, policy)
    return None if fair is None else fair_waiting(view, fair)


def later_waiting(view: JobView, policy: SnoozePolicy | None = None) -> str:
    """A ready job due later, in words: debounced (its job declares ``debounce=`` and it has
    never started: another enqueue of its key moves it, never past its first enqueue plus
    ``debounce_max``), snoozed (how often, of the most its job allows), or scheduled."""
    if policy is not None and policy.debounce_ms is not None and view.started_at is None \
            and policy.debounce_max_ms is not None:
        latest = max(view.run_at, view.created_at + policy.debounce_max_ms)
        return (f"debounced: starts at {iso(view.run_at)} unless enqueued again, "
                f"at the latest {iso(latest)}")
    if view.snoozes > 0:
        most = f" of at most {policy.max_snoozes}" if policy is not None else ""
        return f"snoozed until {iso(view.run_at)} (snooze {view.snoozes}{most})"
    return f"scheduled for {iso(view.run_at)}"


def fair_waiting(view: JobView, place: FairPlace) -> str | None:
    """A due job of a fair queue, in words: where its key stands in the rotation and how many
    of its key's jobs come first. None when neither holds it: it is next, and waits for
    nothing but a free worker (the rotation never leaves one idle while a key has due work)."""
    if not place.ahead and not place.keys_ahead:
        return None
    who = "tenant" if place.key == view.tenant else "key"
    others = place.keys - 1
    if place.keys_ahead is None:
        turn = f"{who} {place.key!r} is joining the rotation"
    elif place.keys_ahead == 0:
        turn = f"{who} {place.key!r} is first in the rotation"
    elif others == 1:
        turn = f"the other key with ready work turns before {who} {place.key!r}"
    else:
        some = f"all {others}" if place.keys_ahead >= others else f"{place.keys_ahead} of the {others}"
        turn = (f"{some} other keys with ready work turn{'s' if place.keys_ahead == 1 else ''} "
                f"before {who} {place.key!r}")
    many = f"{FAIR_AHEAD_MOST}+" if place.ahead >= FAIR_AHEAD_MOST else str(place.ahead)
    line = ("it is first of its jobs" if not place.ahead else
            f"{many} of its due jobs come{'s' if place.ahead == 1 else ''} first")
    return f"its {who}'s share: {turn}; {line}"


def life(view: JobView) -> tuple[HistoryEntry, ...]:
    """The job's history with the lines of its life no row records, read from its own fields
    (nothing is written on the claim or the completion for them): ``enqueued`` (when, by
    whom), ``started`` of its latest run (by which worker) and ``completed``. Only the latest
    run's start is known (each claim overwrites it): an earlier attempt shows its outcome's
    row, never an invented start. A run that left no row (a shed) shows no start."""
    rows: list[tuple[float, int, HistoryEntry]] = [
        (view.created_at, 0, {"at": view.created_at, "attempt": 0, "outcome": "enqueued",
                              "error": None, "traceback": None, "by": view.enqueued_by})]
    rows += [(h["at"], 2, {**h, "by": h.get("by")}) for h in view.history]
    if view.started_at is not None:
        ended = [h for h in view.history if h["at"] >= view.started_at]
        if view.state in ("running", "completed") or ended:
            attempt = ended[0]["attempt"] if ended and view.state != "running" else view.attempt
            rows.append((view.started_at, 1, {"at": view.started_at, "attempt": attempt,
                                              "outcome": "started", "error": None,
                                              "traceback": None, "by": view.claimed_by}))
    if view.state == "completed" and view.finished_at is not None:
        rows.append((view.finished_at, 3, {"at": view.finished_at, "attempt": view.attempt,
                                           "outcome": "completed", "error": None,
                                           "traceback": None, "by": view.claimed_by}))
    return tuple(entry for _, _, entry in sorted(rows, key=lambda r: (r[0], r[1])))


def priority_shown(view: JobView) -> str:
    """A job's priority as ``jobs show`` says it: "2 (enqueued at 9, aged)" once its queue's
    aging (``job(aging=)``) improved it."""
    if view.base_priority is None or view.base_priority == view.priority:
        return str(view.priority)
    return f"{view.priority} (enqueued at {view.base_priority}, aged)"


def shown(view: JobView) -> dict[str, Any]:
    """A job as ``xjobs.get`` answers it and ``xjobsd jobs show --json`` prints it: the job,
    its life (``life``), its steps (without their results: those are the application's data) and what it waits
    for."""
    data: dict[str, Any] = plain(replace(view, steps=(), history=life(view)))
    data["steps"] = [plain(step.as_json()) for step in view.steps]
    data["waiting_for"] = plain(waiting_for(view))
    data["waiting"] = why_waiting(view)
    return data


def queues(driver: QueueStore, known: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every queue declared (``known``: the app's), with live jobs, or paused: paused or not,
    depth, oldest ready age and live counts (read through the partial indexes, never the
    finished bulk); ``changed_at``, when its switch last changed (epoch milliseconds here,
    ISO-8601 once ``plain``). A switch left resumed on a queue nothing else names is no
    queue: a name once paused by mistake does not stay listed for ever. ``waiting``: the live
    jobs that wait, by every reason of ``WAITING_REASONS`` (0 when none does), the numbers
    ``/metrics`` and ``xjobsd status`` show, from the same read."""
    counts = driver.queue_counts()
    summary = driver.queue_summary()
    waits = driver.queue_waiting()
    control = {c.name: c for c in driver.queue_control()}
    paused = {name for name, switch in control.items() if switch.paused}
    rows = []
    for name in sorted(set(counts) | set(summary) | paused | set(known)):
        switch = control.get(name)
        states = counts.get(name, {})
        ready = summary.get(name)
        rows.append({
            "name": name, "paused": bool(switch and switch.paused),
            "paused_by": switch.changed_by if switch and switch.paused else None,
            "changed_at": switch.changed_at if switch else None,
            "depth": ready.depth if ready else 0,
            "oldest_ready_seconds": ready.oldest_ready_ms / 1000.0 if ready else 0.0,
            **{state: states.get(state, 0) for state in ("ready", "running", "suspended", "dead",
                                                         "quarantined")},
            "waiting": {reason: waits.get(name, {}).get(reason, 0) for reason in WAITING_REASONS},
        })
    return rows
