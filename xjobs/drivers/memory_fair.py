"""The memory driver's ``FairClaims`` (``fair.py``): ``job_claim_fair`` as its statement does it.

``turns`` is the table ``fair_tenants``: queue -> key -> pass. ``MemoryTable.ready_hook`` is
the trigger ``fair_ready``: a fair row that becomes ready (inserted, retried, rescued,
released, requeued, woken) adds its key at the queue's lowest pass. A key whose turn finds
nothing due and that has no ready row left is removed at once: with one lock there is no
transaction still making its work ready, which is what may keep Postgres's claimer from it.
"""

from __future__ import annotations

import heapq

from .fair import FAIR_AHEAD_MOST, FairClaim, FairClaims, FairPlace
from .memory_jobs import MemoryJobs
from .memory_rate_keys import rate_open
from .memory_table import MemoryTable, Row, by_claim_order
from .records import ClaimedJob


class MemoryFair(FairClaims):
    def __init__(self, table: MemoryTable, jobs: MemoryJobs) -> None:
        self._table = table
        self._jobs = jobs
        self.turns: dict[str, dict[str, float]] = {}
        table.ready_hook = self.ready

    def ready(self, row: Row) -> None:
        """``fair_ready``: the row's key joins its queue's rotation at the lowest pass."""
        assert row.fair_key is not None   # the trigger's condition
        keys = self.turns.setdefault(row.queue, {})
        if row.fair_key not in keys:
            keys[row.fair_key] = min(keys.values(), default=0.0)

    def job_claim_fair(self, claim: FairClaim) -> list[ClaimedJob]:
        table, queue, names = self._table, claim.queue, claim.names
        weights = claim.weights or {}
        with table.lock:
            at = table.now()
            keys = self.turns.get(queue, {})
            if table.is_paused(queue) or not keys:
                return []
            turns = sorted(keys.items(), key=lambda kv: (kv[1], kv[0]))[:claim.turns]
            ready = [r for r in table.rows.values() if r.state == "ready" and r.queue == queue
                     and r.fair_key is not None]
            heads: list[tuple[float, str, int, Row]] = []
            idle = []
            for key, turn in turns:
                w = weights.get(key, 1.0)
                due = heapq.nsmallest(claim.limit, (r for r in ready if r.fair_key == key and r.run_at <= at
                                                    and r.crashes == 0 and (names is None or r.name in names)
                                                    and rate_open(table, r, at)),
                                      key=by_claim_order)
                heads += [(turn + (nth - 1) / w, key, nth, row) for nth, row in enumerate(due, 1)]
                if not due:
                    idle.append(key)
            chosen = sorted(heads, key=lambda h: h[:3])[:claim.limit]
            served: dict[str, int] = {}
            for _, key, _, _ in chosen:
                served[key] = served.get(key, 0) + 1
            top = max([turn for _, turn in turns]
                      + [turn + served.get(key, 0) / weights.get(key, 1.0) for key, turn in turns])
            for key, turn in turns:
                w = weights.get(key, 1.0)
                if key in served:
                    keys[key] = turn + served[key] / w
                elif key in idle:
                    if any(r.fair_key == key for r in ready):
                        keys[key] = top + 1 / w
                    else:
                        del keys[key]   # fair_forget
            return self._jobs.take([h[3] for h in chosen], at, claim.lease_ms, claim.identity)

    def fair_turns(self, queue: str, limit: int = 100) -> list[tuple[str, float]]:
        with self._table.lock:
            return sorted(self.turns.get(queue, {}).items(), key=lambda kv: (kv[1], kv[0]))[:limit]

    def fair_place(self, job_id: int) -> FairPlace | None:
        """``fair_place``: the keys before the job's in the rotation, its key's due jobs before it."""
        table = self._table
        with table.lock:
            at = table.now()
            row = table.rows.get(job_id)
            if row is None or row.state != "ready" or row.fair_key is None or row.run_at > at or row.crashes:
                return None
            key, place = row.fair_key, by_claim_order(row)
            ahead = sum(1 for r in table.rows.values()
                        if r.state == "ready" and r.queue == row.queue and r.fair_key == key and r.run_at <= at
                        and r.crashes == 0 and by_claim_order(r) < place)
            keys = self.turns.get(row.queue, {})
            turn = keys.get(key)
            keys_ahead = None if turn is None else sum(1 for k, p in keys.items() if (p, k) < (turn, key))
            return FairPlace(key, min(ahead, FAIR_AHEAD_MOST), keys_ahead, len(keys))
