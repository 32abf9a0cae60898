"""The memory driver's ``RateKeyStore``: ``rate_take``, ``rate_key_wait`` and
``rate_key_prune`` as ``queries.sql`` has them, and the claims' ``{_rate_open}`` filter.

``table.rate_keys`` is the ``rate_keys`` table: (job, key) -> (opens, period_ms, cap, n).
Times are rounded where the ``timestamptz`` columns round them (``ts``)."""

from __future__ import annotations

import math
from itertools import groupby
from typing import Sequence

from .memory_table import MemoryTable, Row, by_claim_order, plus, ts
from .rate_keys import PUSH_MOST, RateAsk, RateGrant, RateKeyStore, RateWait


def window_opens(at: float, period_ms: float) -> float:
    """``to_timestamp(floor(epoch_ms / p) * p / 1000)``: the fixed window ``at`` falls in."""
    return ts(math.floor(at / period_ms) * period_ms)


def rate_open(table: MemoryTable, row: Row, at: float) -> bool:
    """``{_rate_open}``: no rate key, or its current window is not full."""
    if row.rate_key is None:
        return True
    window = table.rate_keys.get((row.name, row.rate_key))
    if window is None:
        return True
    opens, period, cap, n = window
    return not (n >= cap and plus(opens, period) > at)


class MemoryRateKeys(RateKeyStore):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table

    def rate_take(self, asks: Sequence[RateAsk]) -> list[RateGrant]:
        table = self._table
        answers: list[RateGrant] = []
        with table.lock:
            at = table.now()
            asked = []
            for ask in asks:
                row = table.held(ask.job_id, ask.token)
                if row is not None and row.rate_key is not None:
                    asked.append((row.name, row.rate_key, row.id, row, ask))
            asked.sort(key=lambda a: (a[0], a[1], a[2]))   # (job, key) order, then by id
            for (job, key), group in groupby(asked, key=lambda a: (a[0], a[1])):
                members = list(group)
                cap = max(a[4].cap for a in members)
                period = max(a[4].period_ms for a in members)
                want = min(len(members), cap)
                opens = window_opens(at, period)
                kept = table.rate_keys.get((job, key))
                if kept is not None and kept[1] == period and kept[0] >= opens:
                    granted = max(0, min(want, cap - kept[3]))
                    opens, n = kept[0], kept[3] + granted
                else:
                    granted = n = want
                table.rate_keys[(job, key)] = (opens, period, cap, n)
                if n >= cap:
                    self._push(job, key, plus(opens, period), period, cap)
                wait = max(0.0, opens - at + period)
                for nth, (_, _, job_id, row, _) in enumerate(members):
                    if nth < granted and (row.started_at is None or row.started_at < opens):
                        row.started_at = max(at, opens)
                    answers.append(RateGrant(job_id, nth < granted, wait))
        return sorted(answers, key=lambda g: g.job_id)

    def _push(self, job: str, key: str, closes: float, period: float, cap: int) -> None:
        """A filled window: the key's due ready jobs, in claim order, to the windows they can
        start in (``waiting`` and ``pushed`` of ``rate_take``)."""
        waiting = sorted((r for r in self._table.rows.values()
                          if r.state == "ready" and r.name == job and r.rate_key == key and r.run_at < closes),
                         key=by_claim_order)[:PUSH_MOST]
        for place, row in enumerate(waiting):
            row.run_at = plus(closes, (place // cap) * period)

    def rate_key_wait(self, job_id: int) -> RateWait | None:
        table = self._table
        with table.lock:
            row = table.rows.get(job_id)
            if row is None or row.rate_key is None:
                return None
            window = table.rate_keys.get((row.name, row.rate_key))
            now = table.now()
            due = row.run_at if row.state == "ready" else None
            if window is None:
                return RateWait(row.rate_key, None, None, None, None, now, due)
            opens, period, cap, n = window
            return RateWait(row.rate_key, cap, n, period, opens, now, due)

    def rate_key_prune(self, age_ms: float) -> int:
        table = self._table
        with table.lock:
            before = ts(table.now() - ts(age_ms))
            gone = [k for k, (opens, period, _, _) in table.rate_keys.items()
                    if opens < before and plus(opens, period) < before]
            for k in gone:
                del table.rate_keys[k]
            return len(gone)
