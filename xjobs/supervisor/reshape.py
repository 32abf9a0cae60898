"""Reshaping the set of slots while running: SIGHUP reload, SIGTTIN/SIGTTOU and ``scale``.

Owned by the arbiter, which checks that the daemon is running before it asks, and speaks to
systemd; this changes the process table (``processes.py``).

* reload re-reads the configuration and replaces children one role group at a time: each
  slot of the group gets a successor, and the old child is retired once the successor is
  ready (``processes``), so a queue keeps its claimers throughout. Each reload has a
  generation number and is ``reloading`` until the last group's successors are ready, then
  ``idle`` (``state``: ``xjobsd status`` shows it, ``xjobsd reload --wait`` polls it). A
  newer reload takes over the groups still to do; a drain ends it where it stands (``abandon``);
* scale adds or removes processes of a queue, for every group whose role's policy is
  ``scalable`` (the workers); a removed slot's child is retired. A command out of range is
  refused; a signal clamps. A queue the app declares and no process serves is added with
  ``make_queue_specs`` (until the next reload).

A child retired here is NOT interrupted: it stops claiming, and its running jobs go on until
the close deadline. Only a real drain (a stop signal, ``xjobsd drain``) interrupts jobs.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import fields
from typing import Callable

from ..config import MAX_PROCESSES, QueueSpec, Settings
from ..errors import InvalidOption, XJobsError
from .processes import ProcessTable
from .slots import RoleSpec, SpecKey

log = logging.getLogger("xjobs.supervisor")

Configure = Callable[[], tuple[Settings, list[RoleSpec]]]
# (queue, processes, concurrency) -> the groups that serve a queue the app declares
MakeQueueSpecs = Callable[[str, int, int], list[RoleSpec]]


class Reshaper:
    def __init__(self, processes: ProcessTable, *, configure: Configure | None = None,
                 registered: dict[str, list[str]] | None = None,
                 make_queue_specs: MakeQueueSpecs | None = None) -> None:
        self.processes = processes
        self.configure = configure
        self.registered = registered or {}   # queue -> job names the app declares
        self.make_queue_specs = make_queue_specs
        self.generation = 0
        self.reloading = False
        self.current: SpecKey | None = None   # the group being replaced
        self._groups: deque[SpecKey] = deque()
        self._specs: dict[SpecKey, RoleSpec] = {}

    # -- reload --------------------------------------------------------------------------------------

    def reload(self) -> dict:
        if self.configure is None:
            return {"ok": False, "error": "this supervisor has no configuration to re-read"}
        try:
            settings, specs = self.configure()
        except Exception as exc:   # a bad file must never take the running daemon down
            log.error("reload refused, keeping the running configuration: %s", exc)
            refusal: dict = {"ok": False, "error": str(exc)}
            if isinstance(exc, XJobsError):   # a refused knob exits 2 from xjobsd reload
                refusal["code"] = exc.code
            return refusal
        table = self.processes
        if (settings.metrics, settings.control) != (table.settings.metrics, table.settings.control):
            log.warning("reload: the metrics and control addresses change only at the next start")
        changes = _changes(table.settings, settings, table.specs, {spec.key: spec for spec in specs})
        for change in changes:
            log.info("reload: %s", change)
        table.settings = settings
        self._specs = {spec.key: spec for spec in specs}
        keys = {s.spec.key for s in table.slots} | set(self._specs)
        self._groups = deque(sorted(keys, key=lambda k: (k[0], k[1] or "")))
        self.current = None
        self.reloading = True
        self.generation += 1
        groups = [_group_label(key) for key in self._groups]
        log.info("reloading configuration (generation %d): replacing %d role group(s) one at a time",
                 self.generation, len(keys))
        return {"ok": True, "groups": groups, "generation": self.generation, "changes": changes}

    def state(self) -> dict:
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
            slots = table.slots_of(key)
            if spec is None:
                table.specs.pop(key, None)
                for slot in slots:
                    table.remove_slot(slot, "removed from the configuration")
                continue
            table.specs[key] = spec
            for slot in slots[:spec.processes]:
                slot.spec = spec
                if slot.child is not None:   # an empty slot just starts on the new spec
                    slot.want_replace = "configuration reloaded"
            for slot in slots[spec.processes:]:
                table.remove_slot(slot, "removed from the configuration")
            if len(slots) < spec.processes:
                table.add_slots(spec, spec.processes - len(slots))
        return False

    # -- scale ---------------------------------------------------------------------------------------

    def unserved(self) -> dict[str, list[str]]:
        """Declared jobs whose queue no per-queue group of this daemon serves (scale may add one)."""
        served = {spec.queue for spec in self.processes.specs.values() if spec.policy.per_queue}
        return {queue: names for queue, names in self.registered.items() if queue not in served}

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              allow_zero: bool = False, clamp: bool = False, concurrency: int | None = None) -> dict:
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
                   concurrency: int | None) -> dict:
        """Serve a queue the app declares that no process of this daemon serves yet. It lasts
        until the next reload or restart, which go by the configuration again."""
        assert self.make_queue_specs is not None
        target = processes if processes is not None else (delta or 0)
        _check_target(queue, 0, target, False, "processes" if processes is not None else "delta")
        specs = self.make_queue_specs(queue, target, concurrency or QueueSpec().concurrency)
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
            said.append(f"{field.name}: {before!r} -> {after!r}")
    if old.dsn != new.dsn:
        said.append("database URL changed: it applies to the new children")
    return said or ["no configuration changed; every group is replaced all the same"]
