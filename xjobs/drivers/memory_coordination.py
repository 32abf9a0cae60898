"""The memory driver's coordination nouns, each a copy of its statements: the scheduler's
leader row and watermarks (``MemorySchedule``: ``LeaderStore``, ``ScheduleStore``), the outbox
(``MemoryOutbox``: ``OutboxStore``) and fleet-wide job slots (``MemorySlots``: ``SlotStore``).

They keep their rows in the one ``MemoryTable`` and take its lock around each verb, so a
dispatch and an outbox publish are as atomic as their transactions in SQL: the fence, the
compare-and-set and the enqueue happen under one lock (``MemoryJobs.insert_locked``). Times
are the table's (the injected clock, rounded as a ``timestamptz`` holds them).
"""

from __future__ import annotations

import secrets
from typing import Sequence

import orjson

from .base import (CallerConnection, Dispatch, Enqueued, JobListener, LeaderStore, LeaderView, NewJob,
                   OutboxClaim, OutboxStore, OutboxSummary, ScheduleStore, Slot, SlotRequest, SlotStore,
                   Watermark)
from .jsonb import as_stored
from .memory_jobs import IdleListener, MemoryJobs
from .memory_table import MemoryTable, plus, ts


class MemorySchedule(LeaderStore, ScheduleStore):
    def __init__(self, table: MemoryTable, jobs: MemoryJobs) -> None:
        self._table = table
        self._jobs = jobs

    def clock_now_ms(self) -> float:
        """``clock_now``."""
        with self._table.lock:
            return self._table.now()

    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool:
        """``leader_elect``: take a free or expired lease, or renew this holder's."""
        table = self._table
        with table.lock:
            at = table.now()
            current = table.leaders.get(election)
            if current is not None and current[0] != holder and current[1] > at:
                return False
            elected = current[2] if current is not None and current[0] == holder else at
            table.leaders[election] = (holder, plus(at, lease_ms), elected)
            return True

    def leader_resign(self, election: str, holder: str) -> bool:
        """``leader_resign``: expire this holder's live lease now."""
        table = self._table
        with table.lock:
            at = table.now()
            current = table.leaders.get(election)
            if current is None or current[0] != holder or current[1] <= at:
                return False
            table.leaders[election] = (holder, at, current[2])
            return True

    def leader_get(self, election: str) -> LeaderView | None:
        """``leader_get``."""
        table = self._table
        with table.lock:
            current = table.leaders.get(election)
            if current is None:
                return None
            holder, expires, elected = current
            return LeaderView(holder, expires, elected, expires > table.now())

    def schedule_state(self) -> list[Watermark]:
        """``schedule_state``, by task."""
        with self._table.lock:
            return [Watermark(task, *row) for task, row in sorted(self._table.watermarks.items())]

    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None:
        """``leader_fence`` + ``schedule_advance`` + the enqueue, under one lock."""
        table = self._table
        with table.lock:
            at = table.now()
            current = table.leaders.get(dispatch.election)
            if current is None or current[0] != dispatch.holder or current[1] <= at:
                return None
            mark = table.watermarks.get(dispatch.task)
            if mark is not None and mark[0] != dispatch.expected_ms:   # a first row just goes in
                return None
            table.watermarks[dispatch.task] = (dispatch.watermark_ms, at,
                                               (mark[2] if mark else 0) + len(dispatch.jobs))
            return self._jobs.insert_locked(dispatch.jobs) if dispatch.jobs else []


class MemoryOutbox(OutboxStore):
    def __init__(self, table: MemoryTable, jobs: MemoryJobs) -> None:
        self._table = table
        self._jobs = jobs

    def outbox_stage(self, jobs: Sequence[NewJob], conn: CallerConnection | None) -> list[int]:
        """``outbox_stage``: there is no application transaction in memory; a row staged here
        exists at once (``conn`` is ignored)."""
        table = self._table
        ids = []
        with table.lock:
            at = table.now()
            for job in jobs:
                outbox_id = table.take_outbox_id()
                doc = orjson.loads(orjson.dumps(job.document()))
                doc["p"] = orjson.loads(as_stored(job.payload))
                if doc.get("r") is None and doc.get("d"):   # a delay counts from the staging
                    doc["r"], doc["d"] = plus(at, doc["d"]), 0.0
                table.outbox[outbox_id] = {"id": outbox_id, "staged_at": at, "job": doc, "claim_token": None,
                                           "claimed_by": None, "claimed_at": None, "published_at": None,
                                           "job_id": None}
                ids.append(outbox_id)
        return ids

    def outbox_listen(self) -> JobListener:
        return IdleListener()

    def outbox_claim(self, holder: str, limit: int, lease_ms: float) -> OutboxClaim:
        """``outbox_claim``: unpublished rows not held by a live claim, (staged_at, id) order."""
        table = self._table
        token = secrets.randbits(63)
        with table.lock:
            at = table.now()
            free = [r for r in table.outbox.values() if r["published_at"] is None
                    and (r["claimed_at"] is None or r["claimed_at"] < ts(at - ts(lease_ms)))]
            picked = sorted(free, key=lambda r: (r["staged_at"], r["id"]))[:limit]
            for row in picked:
                row.update(claim_token=token, claimed_by=holder, claimed_at=at)
            return OutboxClaim(token, holder, tuple(r["id"] for r in picked),
                               tuple(NewJob.from_document(r["job"]) for r in picked))

    def outbox_publish(self, claim: OutboxClaim) -> list[Enqueued] | None:
        """``outbox_publish`` with its enqueue: all of the batch, or nothing."""
        table = self._table
        with table.lock:
            rows = [table.outbox.get(i) for i in claim.ids]
            if any(r is None or r["claim_token"] != claim.token or r["published_at"] is not None for r in rows):
                return None
            results = self._jobs.insert_locked(claim.jobs)
            at = table.now()
            for row, result in zip(rows, results):
                assert row is not None
                row.update(published_at=at, job_id=result.id, claim_token=None)
            return results

    def outbox_release(self, claim: OutboxClaim) -> int:
        """``outbox_release``: fenced on the claim's token."""
        table = self._table
        with table.lock:
            released = 0
            for outbox_id in claim.ids:
                row = table.outbox.get(outbox_id)
                if row is not None and row["claim_token"] == claim.token and row["published_at"] is None:
                    row.update(claim_token=None, claimed_by=None, claimed_at=None)
                    released += 1
            return released

    def outbox_prune(self, retention_ms: float, limit: int) -> int:
        """``outbox_prune``: published rows past their retention, oldest first; the memory
        store stays bounded the same way."""
        table = self._table
        with table.lock:
            cutoff = ts(table.now() - ts(retention_ms))
            doomed = sorted((r for r in table.outbox.values()
                             if r["published_at"] is not None and r["published_at"] < cutoff),
                            key=lambda r: (r["published_at"], r["id"]))[:limit]
            for row in doomed:
                del table.outbox[row["id"]]
            return len(doomed)

    def outbox_summary(self) -> OutboxSummary:
        """``outbox_summary``."""
        table = self._table
        with table.lock:
            pending = [r["staged_at"] for r in table.outbox.values() if r["published_at"] is None]
            return OutboxSummary(len(pending), ts(table.now() - min(pending)) if pending else 0.0)


class MemorySlots(SlotStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def slot_acquire(self, request: SlotRequest) -> int | None:
        """``slot_acquire``: the lowest slot nobody holds, or whose holder's expiry passed."""
        table = self._table
        job, cap, holder, lease_ms = request.job, request.cap, request.holder, request.lease_ms
        with table.lock:
            at = table.now()
            for slot in range(cap):
                current = table.slots.get((job, slot))
                if current is None or current[1] <= at:
                    table.slots[(job, slot)] = (holder, plus(at, lease_ms))
                    return slot
            return None

    def slot_renew(self, slot: Slot, lease_ms: float) -> bool:
        """``slot_renew``: fenced on the holder and on the slot not having expired."""
        table, key = self._table, (slot.job, slot.slot)
        with table.lock:
            at = table.now()
            current = table.slots.get(key)
            if current is None or current[0] != slot.holder or current[1] <= at:
                return False
            table.slots[key] = (slot.holder, plus(at, lease_ms))
            return True

    def slot_release(self, slot: Slot) -> bool:
        """``slot_release``."""
        table, key = self._table, (slot.job, slot.slot)
        with table.lock:
            current = table.slots.get(key)
            if current is None or current[0] != slot.holder:
                return False
            del table.slots[key]
            return True

    def slot_held(self) -> dict[str, int]:
        """``slot_held``: live slots per job."""
        table = self._table
        with table.lock:
            at = table.now()
            out: dict[str, int] = {}
            for (job, _), (_, expires) in table.slots.items():
                if expires > at:
                    out[job] = out.get(job, 0) + 1
            return out
