"""The memory driver's ``Maintenance``, the upkeep of the jobs table, a copy of its statements in ``queries.sql``:
rescue lapsed leases and wake due suspensions, hand back a dead worker's jobs, prune, age priorities.

The verdicts follow the statements' comments (``job_rescue_lapsed``, ``job_release_worker``):
a job is charged its attempt only when it provably ran alone; a job caught beside others
gets its attempt back and becomes a suspect (``crashes + 1``) in one of two halves
(``suspect_group``) run apart next, and its holder is remembered in ``crashed_workers`` so its
later lapses are judged the same.
"""

from __future__ import annotations

import heapq

from .base import Aging, Maintenance, Released, WorkerExit
from .memory_table import MemoryTable, Row, plus, ts


def _halves(rows: list[Row]) -> dict[int, int | None]:
    """The two halves a crashed process's jobs are split into, in id order (the first has the
    odd one), each named by its smallest id; one job alone is in no group."""
    ordered = sorted(r.id for r in rows)
    if len(ordered) < 2:
        return {i: None for i in ordered}
    cut = (len(ordered) + 1) // 2
    return {i: (ordered[0] if n < cut else ordered[cut]) for n, i in enumerate(ordered)}


class MemoryMaintenance(Maintenance):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def job_rescue(self, limit: int = 1000) -> int:
        """``job_rescue_lapsed`` then ``job_wake_due``, each bounded by ``limit``."""
        table = self._table
        with table.lock:
            at = table.now()
            lapsed = heapq.nsmallest(limit, (r for r in table.rows.values() if r.state == "running"
                                             and r.lease_expires_at is not None and r.lease_expires_at < at),
                                     key=lambda r: (r.lease_expires_at or 0.0, r.id))
            holders = {r.claimed_by for r in lapsed}
            company: dict[str | None, int] = {}
            for r in table.rows.values():
                if r.state == "running" and r.claimed_by in holders:
                    company[r.claimed_by] = company.get(r.claimed_by, 0) + 1
            judged = {r.id: company.get(r.claimed_by, 1) == 1 and r.claimed_by not in table.crashed_workers
                      for r in lapsed}
            for row in lapsed:
                if not judged[row.id] and row.claimed_by is not None:
                    table.crashed_workers.setdefault(row.claimed_by, at)
            halves: dict[int, int | None] = {}
            for holder in holders:
                halves.update(_halves([r for r in lapsed if r.claimed_by == holder]))
            for row in lapsed:
                holder = row.claimed_by if row.claimed_by is not None else "?"
                alone = judged[row.id]
                if not alone:
                    row.suspect_group = halves[row.id]
                self._hand_back(
                    row, at, charged=alone, suspect=not alone,
                    dead_error=f"dead: lease expired on the last attempt, held by {holder}",
                    error=(f"lease expired, held by {holder}" if alone else
                           f"lease expired beside other jobs of {holder}; attempt not counted, "
                           "runs apart from other work next"),
                    outcome="lapsed" if alone else "quarantined")
            return len(lapsed) + self._wake_locked(limit, at) + self._wake_delivered_locked(limit)

    def job_wake(self, limit: int = 1000) -> int:
        """``job_wake_due``: due suspensions back to ready."""
        with self._table.lock:
            return self._wake_locked(limit, self._table.now())

    def _wake_delivered_locked(self, limit: int) -> int:
        """``job_wake_delivered``: suspended waits whose event is stored go back to ready."""
        table = self._table
        woken = 0
        for row, waiting in table.suspended_waits():
            if woken >= limit:
                break   # nothing past the limit changes
            if any(s.event is not None and s.event_key is not None
                   and table.first_event(s.event, s.event_key, row.created_at) is not None
                   for s in waiting):
                row.run_at = table.now()   # before the move, which a waiting keyed member undoes
                table.move(row, "ready")
                woken += 1
        return woken

    def _wake_locked(self, limit: int, at: float) -> int:
        due = heapq.nsmallest(limit, (r for r in self._table.rows.values()
                                      if r.state == "suspended" and r.run_at <= at),
                              key=lambda r: (r.run_at, r.id))
        for row in due:
            self._table.move(row, "ready")
        return len(due)

    def job_release_worker(self, worker: WorkerExit) -> list[Released]:
        """``job_release_worker``: every job a dead worker held goes back; a crash charges only
        a job that ran alone (as ``charge`` allows), and makes suspects of the others."""
        table = self._table
        identity, crashed, how, charge = worker.identity, worker.crashed, worker.how, worker.charge
        with table.lock:
            at = table.now()
            for key in [k for k, (holder, _) in table.slots.items() if holder == identity]:
                del table.slots[key]   # its fleet-wide slots go with it (``freed``)
            held = [r for r in table.rows.values() if r.state == "running" and r.claimed_by == identity]
            alone = crashed and len(held) == 1 and identity not in table.crashed_workers
            halves = _halves(held)
            released = []
            for row in held:
                if crashed:
                    row.suspect_group = halves[row.id]
                charged = alone and (charge == "alone" or (charge == "suspect" and row.crashes > 0))
                if not crashed:
                    error, outcome = f"worker stopped by its supervisor, attempt not counted, {identity}", "interrupted"
                elif charged:
                    error, outcome = f"crashed its worker process ({how}, {identity}); attempt counted, runs alone next", "crashed"
                else:
                    error = (f"worker process {how} ({identity}) running {len(held)} job(s); "
                             "attempt not counted, runs apart from other work next")
                    outcome = "quarantined"
                    table.crashed_workers.setdefault(identity, at)
                self._hand_back(row, at, charged=charged, suspect=crashed, error=error, outcome=outcome,
                                dead_error=f"dead: crashed its worker process on the last attempt ({how}, {identity})")
                released.append(Released(row.id, row.name, row.queue, row.state,
                                         "dead" if row.state == "dead" else outcome))
            return released

    def _hand_back(self, row: Row, at: float, *, charged: bool, dead_error: str, error: str,
                   outcome: str, suspect: bool) -> None:
        """One row of ``job_rescue_lapsed`` / ``job_release_worker``: ``charged`` keeps the
        attempt (dead on the last one), otherwise it is not charged; ``suspect`` counts one
        more crash the job was caught in. The attempt is written to the history."""
        ran = row.attempt
        dead = charged and row.attempt >= row.max_attempts
        self._table.move(row, "dead" if dead else "ready")
        row.run_at, row.finished_at = at, (at if dead else None)
        if not charged:
            row.attempt = max(row.attempt - 1, 0)
        if suspect:
            row.crashes += 1
        row.last_error = dead_error if dead else error
        row.lease_token = row.lease_expires_at = None
        self._table.record(row.id, at, ran, "dead" if dead else outcome, row.last_error)

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        """``job_prune``: delete finished rows past their retention (on the clock), oldest first."""
        table = self._table
        with table.lock:
            at = table.now()
            completed_before, finished_before = ts(at - ts(completed_for_ms)), ts(at - ts(finished_for_ms))

            def doomed(r: Row) -> bool:
                if r.finished_at is None:
                    return False
                if r.state == "completed":   # a job inside its dedupe window holds its key
                    return r.finished_at < completed_before and (
                        r.dedupe_window_ms is None or plus(r.finished_at, r.dedupe_window_ms) < at)
                return r.state in ("dead", "cancelled") and r.finished_at < finished_before
            gone = heapq.nsmallest(limit, filter(doomed, table.rows.values()),
                                   key=lambda r: (r.finished_at or 0.0, r.id))
            for row in gone:
                table.forget(row)
            for worker in [w for w, seen in table.crashed_workers.items() if seen < finished_before]:
                del table.crashed_workers[worker]
            return len(gone)

    def job_age(self, aging: Aging, limit: int = 1000) -> int:
        """``job_age``: per level above the floor, its oldest ``limit`` rows that waited a step;
        of those, the oldest ``limit`` whose priority improves move to it."""
        table, step = self._table, aging.step_us
        with table.lock:
            at = table.now()

            def waited(row: Row) -> int:
                return round((at - row.run_at) * 1000.0)

            def aged(row: Row) -> int:
                base = row.priority if row.base_priority is None else row.base_priority
                return max(aging.floor, base - waited(row) // step)
            levels: dict[int, list[Row]] = {}
            for row in table.rows.values():
                if row.state == "ready" and row.queue == aging.queue and row.priority > aging.floor:
                    levels.setdefault(row.priority, []).append(row)
            candidates = [row for rows in levels.values()
                          for row in heapq.nsmallest(limit, (r for r in rows if waited(r) >= step),
                                                     key=lambda r: (r.run_at, r.id))]
            moved = heapq.nsmallest(limit, (r for r in candidates if aged(r) < r.priority),
                                    key=lambda r: (r.run_at, r.id))
            for row in moved:
                to = aged(row)
                if row.base_priority is None:
                    row.base_priority = row.priority
                row.priority = to
            return len(moved)

    def session_count(self, application_name: str) -> int:
        """``session_count``: no process holds a session on memory, so none can linger."""
        return 0
