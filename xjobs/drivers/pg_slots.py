"""The Postgres driver's ``SlotStore``, fleet-wide job slots (``job(concurrency=N)``): one row
per HELD slot.

``slot_acquire`` inserts the lowest free slot (or takes over one whose holder's expiry passed); the
primary key (job, slot) settles a race, so two workers asking at once cannot both get slot 2:
the loser's statement answers no row and it asks again, a bounded number of times.
"""

from __future__ import annotations

from .base import Slot, SlotRequest, SlotStore
from .pg_database import PgDatabase

_RACES = 4   # a slot that another worker took between our look and our insert: look again


class PgSlots(SlotStore):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def slot_acquire(self, request: SlotRequest) -> int | None:
        for _ in range(_RACES):
            with self._db.cursor() as cur:
                cur.execute(self._db.sql["slot_acquire"], {**self._db.now(), "job": request.job, "cap": request.cap,
                                                           "holder": request.holder, "lease": request.lease_ms})
                row = cur.fetchone()
                if row is not None:
                    return int(row[0])
                cur.execute(self._db.sql["slot_held"], self._db.now())
                if dict(cur.fetchall()).get(request.job, 0) >= request.cap:
                    return None     # every slot is held: no race to retry
        return None

    def slot_renew(self, slot: Slot, lease_ms: float) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["slot_renew"], {**self._db.now(), "job": slot.job, "slot": slot.slot,
                                                     "holder": slot.holder, "lease": lease_ms})
            return cur.fetchone() is not None

    def slot_release(self, slot: Slot) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["slot_release"], {"job": slot.job, "slot": slot.slot, "holder": slot.holder})
            return cur.fetchone() is not None

    def slot_held(self) -> dict[str, int]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["slot_held"], self._db.now())
            return {job: int(n) for job, n in cur.fetchall()}
