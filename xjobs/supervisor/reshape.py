"""Reshaping the set of slots while running: SIGHUP reload, SIGTTIN/SIGTTOU and ``scale``.

* reload re-reads the configuration and replaces children one role group at a time: each
  slot of the group gets a successor, and the old child is retired once the successor is
  ready (``supervision``), so a queue keeps its claimers throughout;
* scale adds or removes worker slots of a queue; a removed slot's child is retired.

A child retired here is NOT interrupted: it stops claiming, and its running jobs go on until
the close deadline. Only a real drain (a stop signal, ``xjobsd drain``) interrupts jobs.
Mixed into ``Arbiter``; every method runs on the loop thread.
"""

from __future__ import annotations

import logging
from collections import deque

from ..errors import InvalidOption
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
            return {"ok": False, "error": str(exc)}
        if (settings.metrics, settings.control) != (self.settings.metrics, self.settings.control):
            log.warning("reload: the metrics and control addresses change only at the next start")
        self.settings = settings
        self._reload_specs = {spec.key: spec for spec in specs}
        keys = {s.spec.key for s in self.slots} | set(self._reload_specs)
        self._reload_groups = deque(sorted(keys, key=lambda k: (k[0], k[1] or "")))
        self._reload_current = None
        log.info("reloading configuration: replacing %d role group(s) one at a time", len(keys))
        return {"ok": True, "groups": [f"{role} {queue or ''}".strip() for role, queue in self._reload_groups]}

    def _advance_reload(self) -> None:
        while True:
            current = self._reload_current
            if current is not None and any(s.want_replace for s in self.slots if s.spec.key == current):
                return
            if not self._reload_groups:
                if current is not None:
                    log.info("reload complete")
                    self._reload_current = None
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

    def scale(self, queue: str | None, *, delta: int | None = None, processes: int | None = None,
              floor: int = 0) -> dict:
        if self.state != "running":
            return {"ok": False, "error": f"cannot scale while {self.state}"}
        specs = {key: spec for key, spec in self.specs.items() if spec.role == "worker"}
        chosen = [spec for key, spec in specs.items() if queue is None or key[1] == queue]
        if not chosen:
            raise InvalidOption("queue", f"no worker queue named {queue!r}; running: "
                                         f"{', '.join(sorted(k[1] for k in specs)) or 'none'}")
        result = {}
        for spec in chosen:
            slots = sorted((s for s in self.slots if s.spec.key == spec.key), key=lambda s: s.index)
            target = processes if processes is not None else len(slots) + (delta or 0)
            target = max(floor, min(256, target))
            if target > len(slots):
                self._add_slots(spec, target - len(slots))
            for slot in reversed(slots[target:]):
                self._remove_slot(slot, "scaled down")
            spec.processes = target
            result[spec.queue] = target
            if target != len(slots):
                log.info("queue %s scaled from %d to %d process(es)", spec.queue, len(slots), target)
        return {"ok": True, "processes": result}
