"""Concurrency by key in the memory driver: what migration 14's triggers do to keyed rows,
run by ``MemoryTable`` as its statements would fire them.

A keyed row (``job(concurrency_key=...)``) goes in waiting: suspended, its run_at kept in
``key_run_at`` and replaced by the latest time. Then its key lets waiters in, in id order,
while fewer than ``key_cap`` members hold a place (ready, running or suspended, or dead and
keeping it). A holder that completes, dies without keeping its place, is cancelled or pruned
lets the next one in; a dead or cancelled member that is requeued goes back to waiting.
"""

from __future__ import annotations

from .base import LATEST_MS, LIVE_STATES
from .memory_table import KeyGate, MemoryTable, Row
from .records import KeyPlace

_FINISHED = ("completed", "dead", "cancelled")


def holds_place(row: Row, state: str | None = None) -> bool:
    """Whether ``row`` (in ``state``, its own by default) holds one of its key's places."""
    state = row.state if state is None else state
    return (row.concurrency_key is not None and row.key_run_at is None
            and (state in LIVE_STATES or (state == "dead" and row.key_hold)))


def is_waiting(row: Row) -> bool:
    return row.state == "suspended" and row.key_run_at is not None


def place_of(table: MemoryTable, row: Row) -> KeyPlace | None:
    """What ``job_get`` adds for a keyed row: its key, and the holders of the key's places."""
    if row.concurrency_key is None:
        return None
    holders = tuple(r.id for r in table.rows.values()
                    if r.name == row.name and r.concurrency_key == row.concurrency_key and holds_place(r))
    return KeyPlace(row.concurrency_key, row.key_cap or 1, row.key_hold, is_waiting(row), holders)


class MemoryKeys(KeyGate):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._members: dict[tuple[str, str], list[int]] = {}   # the key's rows, in id order
        table.keys = self

    def members(self, name: str, key: str) -> list[Row]:
        rows = self._table.rows
        return [rows[i] for i in self._members.get((name, key), ()) if i in rows]

    def entered(self, row: Row) -> None:
        """``jobs_key_wait_insert``, then ``key_settle`` for the key."""
        assert row.concurrency_key is not None
        ids = self._members.setdefault((row.name, row.concurrency_key), [])
        ids.append(row.id)
        ids.sort()
        if row.state == "ready":
            row.key_run_at, row.run_at, row.state = row.run_at, LATEST_MS, "suspended"
        self.admit(row.name, row.concurrency_key)

    def moved(self, row: Row, was: str) -> None:
        """``jobs_key_keep_waiting`` for a waiter woken by anything but its key,
        ``jobs_key_wait_update`` for a row back from the dead, and ``key_settle`` for a place let
        go (a waiter let in changes nothing here: ``admit`` counted it). Callers set the row's
        other fields before they move it, as one update sets them all."""
        assert row.concurrency_key is not None
        if row.state == "ready" and was == "suspended" and row.key_run_at is not None:
            row.run_at = LATEST_MS   # jobs_key_keep_waiting: only its key lets a waiter in
            self._table.move(row, "suspended")
        elif row.state == "ready" and was in _FINISHED and not (was == "dead" and row.key_hold):
            row.key_run_at, row.run_at = row.run_at, LATEST_MS
            self._table.move(row, "suspended")
            self.admit(row.name, row.concurrency_key)
        elif holds_place(row, was) and not holds_place(row):
            self.admit(row.name, row.concurrency_key)

    def forgotten(self, row: Row) -> None:
        assert row.concurrency_key is not None
        ids = self._members.get((row.name, row.concurrency_key), [])
        if row.id in ids:
            ids.remove(row.id)
        if not ids:
            self._members.pop((row.name, row.concurrency_key), None)
        if holds_place(row):
            self.admit(row.name, row.concurrency_key)

    def admit(self, name: str, key: str) -> None:
        """``key_admit``: waiters in id order while the key has room (the first waiter's
        ``key_cap`` is the key's concurrency, as the declaration it was enqueued under said)."""
        rows = self.members(name, key)
        waiting = [r for r in rows if is_waiting(r)]
        if not waiting:
            return
        room = (waiting[0].key_cap or 1) - sum(1 for r in rows if holds_place(r))
        for row in waiting[:max(room, 0)]:
            row.run_at, row.key_run_at = row.key_run_at or row.run_at, None
            self._table.move(row, "ready")
