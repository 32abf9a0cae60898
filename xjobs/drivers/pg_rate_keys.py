"""The Postgres driver's ``RateKeyStore`` (``rate_keys.py``): the statements ``rate_take``,
``rate_key_wait`` and ``rate_key_prune`` of ``queries.sql``, bound and shaped here."""

from __future__ import annotations

from typing import Sequence

import orjson

from .pg_database import PgDatabase
from .rate_keys import PUSH_MOST, RateAsk, RateGrant, RateKeyStore, RateWait


class PgRateKeys(RateKeyStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def rate_take(self, asks: Sequence[RateAsk]) -> list[RateGrant]:
        rows = orjson.dumps([{"id": a.job_id, "token": a.token, "cap": a.cap, "period": a.period_ms}
                             for a in asks]).decode()
        with self._db.cursor() as cur:
            # planned for the batch at hand, like the settling verbs (see job_ack_many)
            cur.execute(self._db.sql["rate_take"], {**self._db.now(), "rows": rows, "push": PUSH_MOST,
                                                    "ids": [a.job_id for a in asks]}, prepare=False)
            found = cur.fetchall()
        return sorted((RateGrant(int(r[0]), bool(r[1]), float(r[2])) for r in found), key=lambda g: g.job_id)

    def rate_key_wait(self, job_id: int) -> RateWait | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["rate_key_wait"], {**self._db.now(), "id": job_id})
            row = cur.fetchone()
        if row is None:
            return None
        key, cap, n, period, opens, now, due = row
        return RateWait(key, cap, n, period, opens, float(now), due)

    def rate_key_prune(self, age_ms: float) -> int:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["rate_key_prune"], {**self._db.now(), "age": age_ms})
            row = cur.fetchone()
        return int(row[0]) if row is not None else 0
