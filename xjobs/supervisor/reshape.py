"""Reshaping the set of slots while running: SIGHUP reload, SIGTTIN/SIGTTOU and ``scale``.

* reload re-reads the configuration and replaces children one role group at a time: each
  slot of the group gets a successor, and the old child is retired once the successor is
  ready (``supervision``), so a queue keeps its claimers throughout. Each reload has a
  generation number and is ``reloading`` until the last group's successors are ready, then
  ``idle`` (``reload_state``: ``xjobsd status`` shows it, ``xjobsd reload --wait`` polls it);
  sd_notify hears ``RELOADING=1`` at the start and ``READY=1`` at the end. A newer reload
  takes over the groups still to do; a drain ends it where it stands;
* scale adds or removes worker slots of a queue; a removed slot's child is retired. A command
  out of range is refused; a signal clamps.

A child retired here is NOT interrupted: it stops claiming, and its running jobs go on until
the close deadline. Only a real drain (a stop signal, ``xjobsd drain``) interrupts jobs.
Mixed into ``Arbiter``; every method runs on the loop thread.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import fields
from typing import Any

from ..config import MAX_PROCESSES, QueueSpec
from ..errors import InvalidOption, XJobsError
from . import report
from .slots import Slot

log = logging.getLogger("xjobs.supervisor")


class Reshape:
    # -- reload and scale ---------------------------------------------------------------------------

    def reload(self) -> dict:
        if self.state != "running":
            return {"ok": False, "error": f"cannot reload while {self.state}"}
        if self.configure is None:
            return {"ok": False, "error": "this supervisor has no configuration to re-read"}
        try:
            settings, specs = self.configure()
        except Exception as exc:   # a bad file must never take the running daemon down
            log.error("reload refused, keeping the running configuration: %s", exc)
            refusal = {"ok": False, "error": str(exc)}
            if isinstance(exc, XJobsError):   # a refused knob exits 2 from xjobsd reload
                refusal["code"] = exc.code
            return refusal
        if (settings.metrics, settings.control) != (self.settings.metrics, self.settings.control):
            log.warning("reload: the metrics and control addresses change only at the next start")
        changes = _changes(self.settings, settings, self.specs, {spec.key: spec for spec in specs})
        for change in changes:
            log.info("reload: %s", change)
        self.settings = settings
        self._reload_specs = {spec.key: spec for spec in specs}
        keys = {s.spec.key for s in self.slots} | set(self._reload_specs)
        self._reload_groups = deque(sorted(keys, key=lambda k: (k[0], k[1] or "")))
        self._reload_current = None
        self._reloading = True
        self.reload_generation += 1
        groups = [_group_label(key) for key in self._reload_groups]
        log.info("reloading configuration (generation %d): replacing %d role group(s) one at a time",
                 self.reload_generation, len(keys))
        self.notifier.reloading(f"reloading: replacing {', '.join(groups)} one group at a time")
        return {"ok": True, "groups": groups, "generation": self.reload_generation, "changes": changes}

    def reload_state(self) -> dict:
        """What ``xjobsd reload --wait`` polls: idle once the last group's successors are ready."""
        current = self._reload_current if self._reloading else None
        return {"state": "reloading" if self._reloading else "idle", "generation": self.reload_generation,
                "replacing": _group_label(current) if current is not None else None}

    def _advance_reload(self) -> None:
        while self._reloading:
            current = self._reload_current
            if current is not None and any(s.want_replace for s in self.slots if s.spec.key == current):
                return
            if not self._reload_groups:
                self._reload_current = None
                self._reloading = False
                log.info("reload complete (generation %d)", self.reload_generation)
                self.notifier.ready(report.status_line(self))   # ends systemd's "reloading" state
                return
            key = self._reload_current = self._reload_groups.popleft()
            spec = self._reload_specs.get(key)
            slots = sorted((s for s in self.slots if s.spec.key == key), key=lambda s: s.index)
            if spec is None:
                self.specs.pop(key, None)
                for slot in slots:
                    self._remove_slot(slot, "removed from the configuration")
                continue
            self.specs[key] = spec
            for slot in slots[:spec.processes]:
                slot.spec = spec
                if slot.child is not None:   # an empty slot just starts on the new spec
                    slot.want_replace = "configuration reloaded"
            for slot in slots[spec.processes:]:
                self._remove_slot(slot, "removed from the configuration")
            if len(slots) < spec.processes:
                self._add_slots(spec, spec.processes - len(slots))

    def _remove_slot(self, slot: Slot, reason: str) -> None:
        if slot in self.slots:
            self.slots.remove(slot)
        for child in slot.children():
            self._retire(child, reason, interrupt=False)

    def _add_queue(self, queue: str, delta: int | None, processes: int | None,
                   concurrency: int | None) -> dict:
        """Serve a queue the app declares that no process of this daemon serves yet. It lasts
        until the next reload or restart, which go by the configuration again."""
        target = processes if processes is not None else (delta or 0)
        _check_target(queue, 0, target, False, "processes" if processes is not None else "delta")
        spec = self.make_worker_spec(queue, target, concurrency or QueueSpec().concurrency)
        self.specs[spec.key] = spec
        self._add_slots(spec, target)
        log.info("queue %s added: %d process(es) x %d slot(s) (until the next reload)",
                 queue, target, spec.concurrency)
        return {"ok": True, "processes": {queue: target}, "processes_before": {queue: 0},
                "added": [queue], "concurrency": {queue: spec.concurrency}}

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              allow_zero: bool = False, clamp: bool = False, concurrency: int | None = None) -> dict:
        """Set (``processes``) or shift (``delta``) the processes of one worker queue, or of every
        one (``queue=None``).

        A command out of range is refused as a whole, before any queue changes: more than
        ``MAX_PROCESSES``, or no process left, unless ``allow_zero`` (stopping a queue's
        processes is a deliberate act; ``-100`` is more likely a typo). The signals ``clamp``
        instead, since there is nobody to answer: never above the maximum, and a decrease
        never below one (a queue already at zero stays there).
        """
        if self.state != "running":
            return {"ok": False, "error": f"cannot scale while {self.state}"}
        specs = {key: spec for key, spec in self.specs.items() if spec.role == "worker"}
        chosen = [spec for key, spec in specs.items() if queue is None or key[1] == queue]
        if not chosen and queue is not None and queue in self.registered and self.make_worker_spec:
            return self._add_queue(queue, delta, processes, concurrency)
        if not chosen:
            raise InvalidOption("queue", f"no worker queue named {queue!r}; running: "
                                         f"{', '.join(sorted(k[1] for k in specs)) or 'none'}; "
                                         f"declared by the app: {', '.join(sorted(self.registered)) or 'none'}")
        if concurrency is not None:
            raise InvalidOption("concurrency", "a running queue's slots change with reload (the "
                                               "configuration); --concurrency applies to a queue scale adds")
        plan = []
        for spec in chosen:
            slots = sorted((s for s in self.slots if s.spec.key == spec.key), key=lambda s: s.index)
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
                self._add_slots(spec, target - len(slots))
            for slot in reversed(slots[target:]):
                self._remove_slot(slot, "scaled down")
            spec.processes = target
            before[spec.queue], after[spec.queue] = len(slots), target
            if target != len(slots):
                log.info("queue %s scaled from %d to %d process(es)", spec.queue, len(slots), target)
        return {"ok": True, "processes": after, "processes_before": before}


def _check_target(queue: str, current: int, target: int, allow_zero: bool, option: str) -> None:
    least = 0 if allow_zero else 1
    if least <= target <= MAX_PROCESSES:
        return
    hint = ("; to stop every process of the queue on purpose, scale it to =0 with --allow-zero"
            if target == 0 else "")
    raise InvalidOption(option, f"queue {queue} has {current} process(es) and would have {target}; "
                                f"it may have {least} to {MAX_PROCESSES}{hint}")


def _group_label(key: tuple) -> str:
    role, queue = key
    return f"{role} {queue}" if queue else role


def _changes(old: Any, new: Any, old_specs: dict, new_specs: dict) -> list[str]:
    """What a reload changes, in words: groups added, removed or reshaped, and knobs."""
    said = []
    for key in sorted(set(old_specs) | set(new_specs), key=lambda k: (k[0], k[1] or "")):
        was, now = old_specs.get(key), new_specs.get(key)
        label = _group_label(key)
        if was is None:
            said.append(f"{label} added: {now.processes}x{now.concurrency}")
        elif now is None:
            said.append(f"{label} removed")
        elif (was.processes, was.concurrency) != (now.processes, now.concurrency):
            said.append(f"{label}: {was.processes}x{was.concurrency} -> {now.processes}x{now.concurrency}")
    for field in fields(new):
        if field.name in ("queues", "dsn"):
            continue
        before, after = getattr(old, field.name), getattr(new, field.name)
        if before != after:
            said.append(f"{field.name}: {before!r} -> {after!r}")
    if old.dsn != new.dsn:
        said.append("database URL changed: it applies to the new children")
    return said or ["no configuration changed; every group is replaced all the same"]
