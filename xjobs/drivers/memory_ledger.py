"""The memory driver's backfill ledger: the ``backfill_*`` statements of ``queries.sql``, one
run per row, under the table's one lock and on its clock."""

from __future__ import annotations

import dataclasses

from .ledger import MAX_RUNS, BackfillFinish, BackfillLedger, BackfillRun, BackfillStart
from .memory_table import MemoryTable


class MemoryLedger(BackfillLedger):
    def __init__(self, table: MemoryTable) -> None:
        self._table = table
        self._runs: dict[int, BackfillRun] = {}

    def backfill_start(self, start: BackfillStart) -> BackfillRun:
        """``backfill_start``: insert, or adopt the run's row (started_at kept, completion cleared)."""
        with self._table.lock:
            found = self._runs.get(start.job_id)
            if found is None:
                run = BackfillRun(start.job_id, start.name, "running", 0, self._table.now(), None,
                                  start.checksum, start.environment, None)
            else:
                run = dataclasses.replace(found, state="running", completed_at=None, error=None,
                                          checksum=start.checksum, environment=start.environment)
            self._runs[start.job_id] = run
            return run

    def backfill_progress(self, job_id: int, rows: int) -> bool:
        with self._table.lock:
            found = self._runs.get(job_id)
            if found is None or found.state != "running":
                return False
            self._runs[job_id] = dataclasses.replace(found, rows=rows)
            return True

    def backfill_finish(self, finish: BackfillFinish) -> bool:
        with self._table.lock:
            found = self._runs.get(finish.job_id)
            if found is None:
                return False
            self._runs[finish.job_id] = dataclasses.replace(
                found, state=finish.state, rows=finish.rows, completed_at=self._table.now(), error=finish.error)
            return True

    def backfill_list(self, name: str | None = None) -> list[BackfillRun]:
        with self._table.lock:
            runs = [run for run in self._runs.values() if name is None or run.name == name]
        return sorted(runs, key=lambda run: (run.name, run.started_at, run.job_id))[:MAX_RUNS]
