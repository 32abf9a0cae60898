"""The Postgres driver's ``LeaderStore`` and ``ScheduleStore``: the leader lease row and the
cron watermarks.

``schedule_dispatch`` is the one place a task's occurrences become jobs, in ONE transaction on a
connection of the verbs' pool: lock the leader row (it must still be this holder's, unexpired
on the database's clock: a rival's election then waits for this commit), move the watermark
from what the dispatcher read (compare-and-set), enqueue the jobs through ``PgJobs.job_enqueue`` on the
same connection. Any miss rolls everything back and answers None.
"""

from __future__ import annotations

from .base import Dispatch, Enqueued, LeaderStore, LeaderView, ScheduleStore, Watermark
from .pg_database import PgDatabase, first_row
from .pg_jobs import PgJobs


class _Fenced(Exception):
    """Raised inside a dispatch transaction to roll it back: this holder lost the lease, or
    the watermark moved under it."""


class PgSchedule(LeaderStore, ScheduleStore):
    def __init__(self, db: PgDatabase, jobs: PgJobs) -> None:
        self._db = db
        self._jobs = jobs

    def clock_now_ms(self) -> float:
        """``clock_now``: the database's now."""
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["clock_now"], self._db.now())
            return float(first_row(cur)[0])

    def leader_elect(self, election: str, holder: str, lease_ms: float) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["leader_elect"], {**self._db.now(), "election": election,
                                                       "holder": holder, "lease": lease_ms})
            row = cur.fetchone()
            return row is not None and row[0] == holder

    def leader_resign(self, election: str, holder: str) -> bool:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["leader_resign"], {**self._db.now(), "election": election,
                                                        "holder": holder})
            return cur.fetchone() is not None

    def leader_get(self, election: str) -> LeaderView | None:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["leader_get"], {**self._db.now(), "election": election})
            row = cur.fetchone()
            return None if row is None else LeaderView(*row)

    def schedule_state(self) -> list[Watermark]:
        with self._db.cursor() as cur:
            cur.execute(self._db.sql["schedule_state"])
            return [Watermark(*row) for row in cur.fetchall()]

    def schedule_dispatch(self, dispatch: Dispatch) -> list[Enqueued] | None:
        """``leader_fence``, ``schedule_advance`` and ``job_enqueue`` in one transaction."""
        db = self._db
        try:
            with db.connection() as conn, conn.transaction():
                with conn.cursor() as cur:
                    cur.execute(db.sql["leader_fence"], {**db.now(), "election": dispatch.election,
                                                         "holder": dispatch.holder})
                    if cur.fetchone() is None:
                        raise _Fenced()
                    cur.execute(db.sql["schedule_advance"], {
                        **db.now(), "task": dispatch.task, "watermark": dispatch.watermark_ms,
                        "expected": dispatch.expected_ms, "dispatched": len(dispatch.jobs)})
                    if cur.fetchone() is None:
                        raise _Fenced()
                return self._jobs.job_enqueue(dispatch.jobs, conn) if dispatch.jobs else []
        except _Fenced:
            return None
