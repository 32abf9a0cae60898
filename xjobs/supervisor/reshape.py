"""Reshaping the set of slots while running: a reload's plan, SIGTTIN/SIGTTOU and ``scale``.

Owned by the arbiter, which checks that the daemon is running before it asks, and speaks to
systemd; this changes the process table (``processes.py``).

* reload (``reload.py`` has validated and imported what it asks for) replaces only the groups
  that changed: a group's ``fingerprint`` is its concurrency, every setting its children
  read, and, for a role that runs app code, the digest of the app's modules and of the
  declarations it serves (``appcode.AppImage.digest``). A group whose fingerprint changed gets
  a successor in each slot, one group at a time; the old child is retired once its successor
  is ready (``processes``), so a queue keeps its claimers throughout, and it is told to stop
  its running work as a drain tells it. A group that did not change keeps its children;
  only its number of processes follows the configuration at once (slots added or retired,
  as a scale does). Groups added or removed are started or retired in their turn. Each reload
  has a generation number and is ``reloading`` until the last group's successors are ready,
  then ``idle`` (``state``: ``xjobsd status`` shows it, ``xjobsd reload --wait`` polls it); a
  reload that changes nothing replaces nothing and says so. A newer reload takes over the
  groups still to do; a drain ends it where it stands (``abandon``);
* scale adds or removes processes of a queue, for every group whose role's policy is
  ``scalable`` (the workers); a removed slot's child is retired. A command out of range is
  refused; a signal clamps. A queue the app declares and no process serves is added with
  ``make_queue_specs`` (until the next reload).

A child retired because its slot went away (a scale-down, a group shrunk or removed by a
reload) is NOT interrupted: it stops claiming, and its running jobs go on until the close
deadline; only a drain and a reload's replacement interrupt.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from dataclasses import fields
from typing import Any, Callable

import orjson

from ..config import MAX_PROCESSES, SETTINGS, QueueSpec, Settings
from ..errors import InvalidOption
from .appcode import AppImage
from .processes import ProcessTable
from .slots import RoleSpec, SpecKey

log = logging.getLogger("xjobs.supervisor")

# (queue, processes, concurrency) -> the groups that serve a queue the app declares
# (the running settings, queue, processes, concurrency) -> the groups serving that queue
MakeQueueSpecs = Callable[[Settings, str, int, int], list[RoleSpec]]
# read by the supervisor once, at start: a reload says they changed, and they change at the next start
START_ONLY = tuple(s.field for s in SETTINGS if s.start_only)
# what a group's fingerprint leaves out of the settings: its own shape is its concurrency and
# process count, and the app image says what the configured apps are
_NOT_IN_FINGERPRINT = frozenset(START_ONLY) | {"queues", "apps"}


def fingerprint(spec: RoleSpec, settings: Settings, image: AppImage | None) -> str:
    """What the children of a group are made of; a reload replaces a group whose fingerprint
    changed. Its process count is not in it: more or fewer processes add or retire slots."""
    knobs = {f.name: repr(getattr(settings, f.name)) for f in fields(settings)
             if f.name not in _NOT_IN_FINGERPRINT}
    app = (image.digest(spec.queue if spec.policy.per_queue else None)
           if image is not None and spec.runs_app else None)
    made_of = {"concurrency": spec.concurrency if spec.policy.per_queue else None, "settings": knobs, "app": app}
    return hashlib.sha256(orjson.dumps(made_of, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


class Reshaper:
    def __init__(self, processes: ProcessTable, *, image: AppImage | None = None,
                 registered: dict[str, list[str]] | None = None,
                 make_queue_specs: MakeQueueSpecs | None = None) -> None:
        self.processes = processes
        self.image = image                   # the app the running groups were made from
        self.registered = registered or {}   # queue -> job names the app declares
        self.make_queue_specs = make_queue_specs
        self.generation = 0
        self.reloading = False
        self.current: SpecKey | None = None   # the group being replaced
        self.last: dict[str, Any] | None = None         # what the last reload did (``xjobsd status``)
        self._groups: deque[SpecKey] = deque()
        self._specs: dict[SpecKey, RoleSpec] = {}

    # -- reload --------------------------------------------------------------------------------------

    def reload(self, settings: Settings, specs: list[RoleSpec], image: AppImage | None = None,
               app_changes: list[str] | None = None,
               registered: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """Plan a reload to ``settings`` and ``specs``, made from ``image``; answers what it
        replaces (``groups``, one at a time from the next pass), what it leaves and what changed."""
        table = self.processes
        new = {spec.key: spec for spec in specs}
        before = {key: fingerprint(spec, table.settings, self.image) for key, spec in table.specs.items()}
        after = {key: fingerprint(spec, settings, image) for key, spec in new.items()}
        # a reload still under way: the groups it had not reached are still to do
        todo = {key for key in set(before) | set(after) if before.get(key) != after.get(key)} | set(self._groups)
        changes = _changes(table.settings, settings, table.specs, new) + list(app_changes or ())
        for change in changes:
            log.info("reload: %s", change)
        for key, spec in new.items():
            if key not in todo:   # the same children; only their number follows the configuration
                self._resize(spec, "removed from the configuration")
        table.settings, self.image = settings, image
        if registered is not None:
            self.registered = registered
        self._specs = new
        ordered = sorted(todo, key=lambda k: (k[0], k[1] or ""))
        self._groups = deque(ordered)
        self.current = None
        self.reloading = bool(ordered)
        self.generation += 1
        groups = [_group_label(key) for key in ordered]
        unchanged = [_group_label(key) for key in sorted(set(new) - todo, key=lambda k: (k[0], k[1] or ""))]
        self.last = {"generation": self.generation, "replaced": groups, "changes": changes}
        if groups:
            log.info("reloading (generation %d): replacing %s one group at a time; unchanged: %s",
                     self.generation, ", ".join(groups), ", ".join(unchanged) or "none")
        else:
            log.info("reloaded (generation %d): no group changed, no child is replaced", self.generation)
        return {"ok": True, "groups": groups, "unchanged": unchanged, "generation": self.generation,
                "changes": changes}

    def state(self) -> dict[str, Any]:
        """What ``xjobsd reload --wait`` polls: idle once the last group's successors are ready."""
        current = self.current if self.reloading else None
        return {"state": "reloading" if self.reloading else "idle", "generation": self.generation,
                "replacing": _group_label(current) if current is not None else None}

    def abandon(self) -> None:
        """A drain began: the groups not yet replaced stay as they are."""
        self._groups.clear()
        self.current = None
        self.reloading = False

    def advance(self) -> bool:
        """Move the reload on by whole groups; True when it has just completed."""
        table = self.processes
        while self.reloading:
            current = self.current
            if current is not None and any(s.want_replace for s in table.slots_of(current)):
                return False
            if not self._groups:
                self.current = None
                self.reloading = False
                log.info("reload complete (generation %d)", self.generation)
                return True
            key = self.current = self._groups.popleft()
            spec = self._specs.get(key)
            if spec is None:
                table.specs.pop(key, None)
                for slot in table.slots_of(key):
                    table.remove_slot(slot, "removed from the configuration")
                continue
            for slot in table.slots_of(key)[:spec.processes]:
                if slot.child is not None:   # an empty slot just starts on the new spec
                    slot.ask_replace("reloaded", interrupt=True)
            self._resize(spec, "removed from the configuration")
        return False

    def _resize(self, spec: RoleSpec, why: str) -> None:
        """``spec`` is the group's from now on: its slots take it (a child started later runs
        it) and their number follows ``spec.processes``."""
        table = self.processes
        table.specs[spec.key] = spec
        slots = table.slots_of(spec.key)
        for slot in slots[:spec.processes]:
            slot.spec = spec
        for slot in slots[spec.processes:]:
            table.remove_slot(slot, why)
        if len(slots) < spec.processes:
            table.add_slots(spec, spec.processes - len(slots))

    # -- scale ---------------------------------------------------------------------------------------

    def unserved(self) -> dict[str, list[str]]:
        """Declared jobs whose queue no per-queue group of this daemon serves (scale may add one)."""
        served = {spec.queue for spec in self.processes.specs.values() if spec.policy.per_queue}
        return {queue: names for queue, names in self.registered.items() if queue not in served}

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              allow_zero: bool = False, clamp: bool = False,
              concurrency: int | None = None) -> dict[str, Any]:
        """Set (``processes``) or shift (``delta``) the processes of one queue, or of every
        one (``queue=None``), in every group whose role is ``scalable``.

        A command out of range is refused as a whole, before any queue changes: more than
        ``MAX_PROCESSES``, or no process left, unless ``allow_zero`` (stopping a queue's
        processes is a deliberate act; ``-100`` is more likely a typo). The signals ``clamp``
        instead, since there is nobody to answer: never above the maximum, and a decrease
        never below one (a queue already at zero stays there).
        """
        table = self.processes
        scalable = [spec for spec in table.specs.values() if spec.policy.scalable]
        chosen = [spec for spec in scalable if queue is None or spec.queue == queue]
        if not chosen and queue is not None and queue in self.registered and self.make_queue_specs:
            return self._add_queue(queue, delta, processes, concurrency)
        if not chosen:
            raise InvalidOption("queue", f"no queue named {queue!r} runs here to scale; running: "
                                         f"{', '.join(sorted(str(s.queue) for s in scalable)) or 'none'}; "
                                         f"declared by the app: {', '.join(sorted(self.registered)) or 'none'}")
        if concurrency is not None:
            raise InvalidOption("concurrency", "a running queue's slots change with reload (the "
                                               "configuration); --concurrency applies to a queue scale adds")
        plan = []
        for spec in chosen:
            slots = table.slots_of(spec.key)
            target = processes if processes is not None else len(slots) + (delta or 0)
            if clamp:
                clamped = min(MAX_PROCESSES, max(target, min(len(slots), 1)))
                if clamped != target:   # the signal's sender has no answer to read: say it here
                    log.info("queue %s stays at %d process(es): a signal takes no queue below one "
                             "process or above %d", spec.queue, clamped, MAX_PROCESSES)
                target = clamped
            else:
                _check_target(spec.queue, len(slots), target, allow_zero,
                              "processes" if processes is not None else "delta")
            plan.append((spec, slots, target))
        before, after = {}, {}
        for spec, slots, target in plan:
            if target > len(slots):
                table.add_slots(spec, target - len(slots))
            for slot in reversed(slots[target:]):
                table.remove_slot(slot, "scaled down")
            spec.processes = target
            before[spec.queue], after[spec.queue] = len(slots), target
            if target != len(slots):
                log.info("queue %s scaled from %d to %d process(es)", spec.queue, len(slots), target)
        return {"ok": True, "processes": after, "processes_before": before}

    def _add_queue(self, queue: str, delta: int | None, processes: int | None,
                   concurrency: int | None) -> dict[str, Any]:
        """Serve a queue the app declares that no process of this daemon serves yet. It lasts
        until the next reload or restart, which go by the configuration again."""
        assert self.make_queue_specs is not None
        target = processes if processes is not None else (delta or 0)
        _check_target(queue, 0, target, False, "processes" if processes is not None else "delta")
        specs = self.make_queue_specs(self.processes.settings, queue, target,
                                      concurrency or QueueSpec().concurrency)
        if not specs:
            raise InvalidOption("queue", f"no role of this daemon serves a queue: {queue!r} cannot be added")
        for spec in specs:
            self.processes.specs[spec.key] = spec
            self.processes.add_slots(spec, target)
            log.info("queue %s added: %s %d process(es) x %d slot(s) (until the next reload)",
                     queue, spec.role, target, spec.concurrency)
        return {"ok": True, "processes": {queue: target}, "processes_before": {queue: 0},
                "added": [queue], "concurrency": {queue: specs[0].concurrency}}


def _check_target(queue: str | None, current: int, target: int, allow_zero: bool, option: str) -> None:
    least = 0 if allow_zero else 1
    if least <= target <= MAX_PROCESSES:
        return
    hint = ("; to stop every process of the queue on purpose, scale it to =0 with --allow-zero"
            if target == 0 else "")
    raise InvalidOption(option, f"queue {queue} has {current} process(es) and would have {target}; "
                                f"it may have {least} to {MAX_PROCESSES}{hint}")


def _group_label(key: SpecKey) -> str:
    role, queue = key
    return f"{role} {queue}" if queue else role


def _changes(old: Settings, new: Settings, old_specs: dict[SpecKey, RoleSpec],
             new_specs: dict[SpecKey, RoleSpec]) -> list[str]:
    """What a reload changes, in words: groups added, removed or reshaped, and knobs."""
    said = []
    for key in sorted(set(old_specs) | set(new_specs), key=lambda k: (k[0], k[1] or "")):
        was, now = old_specs.get(key), new_specs.get(key)
        label = _group_label(key)
        if was is None and now is not None:
            said.append(f"{label} added" + (f": {now.shape}" if now.policy.per_queue else ""))
        elif now is None:
            said.append(f"{label} removed")
        elif was is not None and was.shape != now.shape:
            said.append(f"{label}: {was.shape} -> {now.shape}")
    for field in fields(new):
        if field.name in ("queues", "dsn"):
            continue
        before, after = getattr(old, field.name), getattr(new, field.name)
        if before != after:
            later = " (read at start only: it changes at the next start)" if field.name in START_ONLY else ""
            said.append(f"{field.name}: {before!r} -> {after!r}{later}")
    if old.dsn != new.dsn:
        said.append("database URL changed: it applies to the new children")
    return said
