"""``step_put`` for every run of a process, coalesced: the results that arrive while one batch
is being written go out together in the next, one statement and one commit for all of them,
on one connection of the steps' pool.

Why: a worker with 128 slots running step jobs would otherwise want a connection per run
recording a step (the server's connections grow with the slots) or queue 128 single-row
commits behind a few connections. Coalesced, the process makes one write at a time whatever
its slots, and a busy process writes more steps per commit instead of more commits.

How a caller waits: it adds its result to the pending list. If no batch is being written it
writes one itself (everything pending, its own result included, up to ``MAX_BATCH``); else it
waits until a batch that held its result is done, or until no batch is being written and its
result is still pending, when it writes the next one. Whoever writes answers every result of
the batch. So every caller returns only once ITS result is committed (or refused by its
fence, or failed), a step is durable before ``step.run`` returns, exactly as one write each.

What a batch answers per result: written (True), or nothing written (False: the run no longer
holds its job under that token, or the step was recorded already), as ``step_put`` alone. A
batch that fails on the server for any reason but a lost connection or a timeout (a deadlock
with a cancel taking one of its jobs, say) is written again one result at a time, so one
run's trouble is never another run's error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from ..errors import DatabaseTimeout, DatabaseUnavailable, DriverError
from .records import Lease
from .records_steps import StepResult

if TYPE_CHECKING:
    from .pg_database import PgDatabase

# the most results one statement carries: a few hundred rows keep the statement short and the
# share locks it takes few, and a worker rarely has more runs recording a step at once
MAX_BATCH = 256


@dataclass(eq=False)
class _Pending:
    lease: Lease
    step: StepResult
    done: bool = False
    written: bool = False
    error: BaseException | None = field(default=None)


class PgStepWrites:
    def __init__(self, db: "PgDatabase") -> None:
        self._db = db
        self._changed = threading.Condition()
        self._pending: list[_Pending] = []
        self._writing = False

    @property
    def waiting(self) -> int:
        """The results waiting for the next batch (not the one being written)."""
        with self._changed:
            return len(self._pending)

    def put(self, lease: Lease, step: StepResult) -> bool:
        """``step_put``: True once the result is committed, False when nothing was written."""
        mine = _Pending(lease, step)
        with self._changed:
            self._pending.append(mine)
            while not mine.done:
                if self._writing:
                    self._changed.wait()
                    continue
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                self._writing = True
                self._changed.release()
                try:
                    self._write(batch)
                finally:
                    self._changed.acquire()
                    self._writing = False
                    self._changed.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.written

    def _write(self, batch: list[_Pending]) -> None:
        try:
            written = self._write_many(batch)
        except (DatabaseUnavailable, DatabaseTimeout) as exc:
            for pending in batch:
                pending.error = exc
        except DriverError:
            for pending in batch:
                try:
                    pending.written = self._write_one(pending)
                except BaseException as exc:      # each caller sees its own write's failure
                    pending.error = exc
        except BaseException as exc:      # an interpreter error still reaches every caller
            for pending in batch:
                pending.error = exc
        else:
            for pending in batch:
                pending.written = (pending.lease.job_id, pending.step.name) in written
        for pending in batch:
            pending.done = True

    def _write_many(self, batch: list[_Pending]) -> set[tuple[int, str]]:
        rows = [{"id": p.lease.job_id, "token": p.lease.token, "name": p.step.name,
                 "attempt": p.step.attempt, "result": p.step.result.decode(),
                 "duration": p.step.duration_ms} for p in batch]
        params = {**self._db.now(), "rows": orjson.dumps(rows).decode(),
                  "ids": sorted({p.lease.job_id for p in batch})}
        with self._db.step_cursor() as cur:
            cur.execute(self._db.sql["step_put_many"], params, prepare=False)
            return {(int(job_id), name) for job_id, name in cur.fetchall()}

    def _write_one(self, pending: _Pending) -> bool:
        lease, step = pending.lease, pending.step
        with self._db.step_cursor() as cur:
            cur.execute(self._db.sql["step_put"], {
                **self._db.now(), "id": lease.job_id, "token": lease.token, "name": step.name,
                "attempt": step.attempt, "result": step.result.decode(), "duration": step.duration_ms})
            return cur.fetchone() is not None
