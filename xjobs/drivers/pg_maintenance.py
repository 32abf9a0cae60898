"""The Postgres driver's upkeep of the jobs table: rescue lapsed leases and wake due
suspensions, hand back a dead worker's jobs, prune past retention, count a child's sessions.

None of this is on a run's own path; it is what keeps the table honest when processes die
and time passes. Each verb is one or two statements of ``queries.sql``; jobs that come back
to ready wake their queues' idle workers (``PgDatabase.notify``), since the insert trigger
only sees new rows.
"""

from __future__ import annotations

from .base import Released
from .pg_database import PgDatabase, first_row


class PgMaintenance:
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def rescue(self, limit: int) -> int:
        """``job_rescue_lapsed``, ``job_wake_due`` and ``job_wake_delivered``, each bounded by
        ``limit``."""
        params = {**self._db.now(), "limit": limit}
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_rescue_lapsed"], params)
            moved = cur.fetchall()
            cur.execute(self._db.sql["job_wake_due"], params)
            moved += cur.fetchall()
            cur.execute(self._db.sql["job_wake_delivered"], params)
            moved += cur.fetchall()
            self._db.notify(cur, moved)
            return len(moved)

    def wake(self, limit: int) -> int:
        """``job_wake_due``: due suspensions back to ready, their queues woken."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_wake_due"], {**self._db.now(), "limit": limit})
            woken = cur.fetchall()
            self._db.notify(cur, woken)
            return len(woken)

    def release_worker(self, worker_id: str, crashed: bool, how: str, charge: str) -> list[Released]:
        """``job_release_worker``: every job a dead worker held goes back (see the statement)."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_release_worker"], {
                **self._db.now(), "worker": worker_id, "crashed": crashed, "how": how,
                "charge": charge})
            released = [Released(*row) for row in cur.fetchall()]
            self._db.notify(cur, [(r.id, r.queue, r.state) for r in released])
            return released

    def prune(self, completed_for_ms: float, finished_for_ms: float, limit: int) -> int:
        """``job_prune``: finished rows past retention, oldest first, on the database's clock."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_prune"], {
                **self._db.now(), "completed_for": completed_for_ms,
                "finished_for": finished_for_ms, "limit": limit})
            return int(first_row(cur)[0])

    def session_count(self, application_name: str) -> int:
        """``session_count``: open sessions announcing ``application_name`` in this database."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["session_count"], {"application_name": application_name})
            return int(first_row(cur)[0])
