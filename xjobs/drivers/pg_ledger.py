"""The Postgres driver's backfill ledger (``ledger.BackfillLedger``): the ``backfills`` table,
one row per run, through the ``backfill_*`` statements of ``queries.sql``."""

from __future__ import annotations

from typing import Any, Sequence

from .ledger import MAX_RUNS, BackfillFinish, BackfillLedger, BackfillRun, BackfillStart
from .pg_database import PgDatabase


def _run(row: Sequence[Any]) -> BackfillRun:
    return BackfillRun(job_id=int(row[0]), name=row[1], state=row[2], rows=int(row[3]),
                       started_at=float(row[4]), completed_at=None if row[5] is None else float(row[5]),
                       checksum=row[6], environment=row[7], error=row[8])


class PgLedger(BackfillLedger):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def backfill_start(self, start: BackfillStart) -> BackfillRun:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["backfill_start"], {
                **self._db.now(), "job_id": start.job_id, "name": start.name,
                "checksum": start.checksum, "environment": start.environment})
            row = cur.fetchone()
            assert row is not None      # an upsert always answers its row
            return _run(row)

    def backfill_progress(self, job_id: int, rows: int) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["backfill_progress"], {"job_id": job_id, "swept": rows})
            return cur.fetchone() is not None

    def backfill_finish(self, finish: BackfillFinish) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["backfill_finish"], {
                **self._db.now(), "job_id": finish.job_id, "state": finish.state, "swept": finish.rows,
                "error": finish.error})
            return cur.fetchone() is not None

    def backfill_list(self, name: str | None = None) -> list[BackfillRun]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["backfill_list"], {"name": name, "limit": MAX_RUNS})
            return [_run(row) for row in cur.fetchall()]
