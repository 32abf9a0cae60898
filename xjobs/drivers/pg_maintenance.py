"""The Postgres driver's ``Maintenance``, the upkeep of the jobs table: rescue lapsed leases and wake due
suspensions, hand back a dead worker's jobs, prune past retention, age ready rows' priorities,
count a child's sessions.

None of this is on a run's own path; it is what keeps the table honest when processes die
and time passes. Each verb is one or two statements of ``queries.sql``; jobs that come back
to ready wake their queues' idle workers (``PgDatabase.notify``), since the insert trigger
only sees new rows.
"""

from __future__ import annotations

from typing import Any, Sequence

from .base import Aging, Maintenance, Released, WorkerExit
from .pg_database import PgDatabase, first_row


class PgMaintenance(Maintenance):
    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def job_rescue(self, limit: int = 1000) -> int:
        """``job_rescue_lapsed``, ``job_wake_due`` and ``job_wake_delivered``, each bounded by
        ``limit``."""
        return self._back_to_ready(("job_rescue_lapsed", "job_wake_due", "job_wake_delivered"), limit)

    def job_wake(self, limit: int = 1000) -> int:
        """``job_wake_due``: due suspensions back to ready, their queues woken."""
        return self._back_to_ready(("job_wake_due",), limit)

    def _back_to_ready(self, statements: Sequence[str], limit: int) -> int:
        """Run ``statements`` in order, each bounded by ``limit`` and answering ``(id, queue,
        state)`` rows, then wake the queues of every row that came back to ready, once."""
        params = {**self._db.now(), "limit": limit}
        moved: list[tuple[Any, ...]] = []
        with self._db.cursor() as cur:
            for name in statements:
                cur.execute(self._db.sql[name], params)
                moved += cur.fetchall()
            self._db.notify(cur, moved)
            self._db.settled(cur, [row[0] for row in moved if row[2] == "dead"])   # a rescue spent the last attempt
        return len(moved)

    def job_release_worker(self, worker: WorkerExit) -> list[Released]:
        """``job_release_worker``: every job a dead worker held goes back (see the statement)."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_release_worker"], {
                **self._db.now(), "worker": worker.identity, "crashed": worker.crashed, "how": worker.how,
                "charge": worker.charge})
            released = [Released(*row) for row in cur.fetchall()]
            self._db.notify(cur, [(r.id, r.queue, r.state) for r in released])
            self._db.settled(cur, [r.id for r in released if r.state == "dead"])
            return released

    def job_prune(self, completed_for_ms: float, finished_for_ms: float, limit: int = 1000) -> int:
        """``job_prune``: finished rows past retention, oldest first, on the database's clock."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_prune"], {
                **self._db.now(), "completed_for": completed_for_ms,
                "finished_for": finished_for_ms, "limit": limit})
            return int(first_row(cur)[0])

    def job_age(self, aging: Aging, limit: int = 1000) -> int:
        """``job_age``: the queue's ready rows a level better per step waited (no queue to wake:
        a worker with room claims the queue anyway, and now in the new order)."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["job_age"], {
                **self._db.now(), "queue": aging.queue, "floor": aging.floor, "limit": limit,
                "step_us": aging.step_us})
            return len(cur.fetchall())

    def session_count(self, application_name: str) -> int:
        """``session_count``: open sessions announcing ``application_name`` in this database."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["session_count"], {"application_name": application_name})
            return int(first_row(cur)[0])
