"""The Postgres driver's ``FairClaims`` (``fair.py``): ``job_claim_fair`` and ``fair_forget``
in ``queries.sql``; the rotation's keys are added by the trigger ``fair_ready`` of migration 15,
inside whichever statement makes a fair row ready, so no other verb needed to change.

A claim is one statement on the pool (autocommit, like ``job_claim``). The keys it found with
nothing due come back beside the jobs; those are then forgotten in a transaction of their own:
``fair_forget_lock`` takes the bucket locks no transaction making work ready holds, and
``fair_forget``, a statement later (so its snapshot sees every ready row committed by then),
removes the keys that have none. A key whose bucket is held stays, and is passed over again.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from .fair import FAIR_AHEAD_MOST, FairClaim, FairClaims, FairPlace
from .pg_database import PgDatabase
from .records import ClaimedJob


class PgFair(FairClaims):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def job_claim_fair(self, claim: FairClaim) -> list[ClaimedJob]:
        token = secrets.randbits(63)
        params: dict[str, Any] = {
            **self._db.now(), "queue": claim.queue, "limit": claim.limit, "turns": claim.turns,
            "token": token, "worker": claim.identity, "lease": claim.lease_ms,
            "names": None if claim.names is None else sorted(claim.names),
            "weights": orjson.dumps([{"k": k, "w": w} for k, w in sorted((claim.weights or {}).items())]).decode()}
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_claim_fair"], params)
            rows = cur.fetchall()
        idle = sorted(r[9] for r in rows if r[0] is None)
        if idle:
            self._forget(claim.queue, idle)
        claimed = sorted(r for r in rows if r[0] is not None)
        return [ClaimedJob(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], token, r[8], r[10], r[11])
                for r in claimed]

    def _forget(self, queue: str, keys: list[str]) -> None:
        with self._db.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(self._db.sql["fair_forget_lock"], {"queue": queue, "idle": keys})
            free = [r[0] for r in cur.fetchall()]
            if free:
                cur.execute(self._db.sql["fair_forget"], {"queue": queue, "idle": free})

    def fair_turns(self, queue: str, limit: int = 100) -> list[tuple[str, float]]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["fair_turns"], {"queue": queue, "limit": limit})
            return [(r[0], float(r[1])) for r in cur.fetchall()]

    def fair_place(self, job_id: int) -> FairPlace | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["fair_place"], {**self._db.now(), "id": job_id, "most": FAIR_AHEAD_MOST})
            row = cur.fetchone()
        return None if row is None else FairPlace(row[0], row[1], row[2], row[3])
