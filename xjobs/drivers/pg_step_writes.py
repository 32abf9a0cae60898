"""A run's ``step_put`` and its first ``step_list``, coalesced over every run of a process: the
results and reads that arrive while one batch is on the server go out together in the next,
one statement per kind (and one commit for the results), on one connection of the steps' pool.

Why: a worker with 128 slots running step jobs would otherwise want a connection per run
recording a step (the server's connections grow with the slots) or queue 128 single-row
commits behind a few connections. Coalesced, the process makes one round of statements at a
time whatever its slots, and a busy process writes more steps per commit instead of more
commits. The reads ride along for the same reason: every attempt of a step job reads its
recorded steps once, at its first step, and 128 attempts starting together would otherwise
queue 128 reads behind the writes on the same few connections.

How a caller waits: it adds its request to the pending list. If no batch is under way it
writes one itself (its own request alone, the list being empty); else it waits on its own
wake-up, which comes either when a batch that held its request is done, or when it is chosen
to write the next batch: whoever wrote a batch hands the next one to the oldest request still
pending, so every wake-up is one caller's, never every waiter's (a pass of 256 results wakes
those 256 threads and one more, not every thread of the process to look and sleep again).
Whoever writes answers every request of the batch. So every caller returns only once ITS
result is committed (or refused by its fence, or failed), a step is durable before
``step.run`` returns, exactly as one write each.

What a batch answers per result: written (True), or nothing written (False: the run no longer
holds its job under that token, or the step was recorded already), as ``step_put`` alone; per
read, the job's ``StepLog``, as ``step_list`` alone. A batch that fails on the server for any
reason but a lost connection or a timeout (a deadlock with a cancel taking one of its jobs,
say) is made again one request at a time, so one run's trouble is never another run's error.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import orjson

from ..errors import DatabaseTimeout, DatabaseUnavailable, DriverError
from .records import Lease
from .records_steps import StepLog, StepRecord, StepResult

if TYPE_CHECKING:
    import psycopg

    from .pg_database import PgDatabase

# the most requests one batch carries: a few hundred rows keep the statements short and the
# share locks they take few, and a worker rarely has more runs making a step at once
MAX_BATCH = 256


def _taken() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass(eq=False)
class _Pending:
    """One caller's request: a result to write (``step``) or a job's steps to read."""

    job_id: int
    lease: Lease | None = None
    step: StepResult | None = None
    # released when done or handed a batch (the caller waits by taking it): a bare lock is one
    # futex each way where an Event is a Condition of two locks, and a batch wakes dozens of
    # callers under the GIL. A caller handed a batch takes it again before its batch releases it
    woken: threading.Lock = field(default_factory=_taken)
    batch: "list[_Pending] | None" = None      # the batch this caller makes, when handed one
    written: bool = False
    log: StepLog | None = None
    error: BaseException | None = None


class PgStepWrites:
    def __init__(self, db: "PgDatabase", writers: int | None = None) -> None:
        self._db = db
        # batches on the server at once: one per connection of the steps' pool, so a batch's
        # commit overlaps the next batch's statement instead of holding every caller behind it
        self._writers = db.step_pool_size if writers is None else writers
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._busy = 0      # batches being made now

    @property
    def waiting(self) -> int:
        """The requests waiting for the next batch (not the one being written)."""
        with self._lock:
            return len(self._pending)

    def put(self, lease: Lease, step: StepResult) -> bool:
        """``step_put``: True once the result is committed, False when nothing was written."""
        return self._submit(_Pending(lease.job_id, lease, step)).written

    def read(self, job_id: int) -> StepLog:
        """``step_list`` of a run: every step ``job_id`` recorded."""
        log = self._submit(_Pending(job_id)).log
        assert log is not None    # a done read without an error has its log
        return log

    def _submit(self, mine: _Pending) -> _Pending:
        with self._lock:
            self._pending.append(mine)
            now = self._busy < self._writers     # then nothing else is pending: a batch of one
            if now:
                self._busy += 1
                mine.batch = self._take()
        if not now:
            # whether or not a batch was handed over meanwhile: every wait takes the one
            # release its request gets (a hand-over or its batch done), no more, no fewer
            mine.woken.acquire()
        batch = mine.batch
        if batch is not None:
            # this caller's turn (its own request is in the batch); the batch was taken off
            # the pending list when it was handed over, so no request is in two
            try:
                self._make(batch)
            finally:
                with self._lock:
                    if self._pending:
                        given = self._take()
                        given[0].batch = given
                        given[0].woken.release()
                    else:
                        self._busy -= 1
        if mine.error is not None:
            raise mine.error
        return mine

    def _take(self) -> list[_Pending]:
        """The oldest pending requests, a batch of them (under the lock)."""
        batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        return batch

    def _make(self, batch: list[_Pending]) -> None:
        writes = [p for p in batch if p.step is not None]
        reads = [p for p in batch if p.step is None]
        try:
            if writes:
                self._answer(writes, self._write_many, self._write_one)
            if reads:
                self._answer(reads, self._read_many, self._read_one)
        finally:
            for pending in batch:
                pending.woken.release()

    @staticmethod
    def _answer(part: list[_Pending], many: Callable[[list[_Pending]], None],
                one: Callable[[_Pending], None]) -> None:
        try:
            many(part)
        except (DatabaseUnavailable, DatabaseTimeout) as exc:
            for pending in part:
                pending.error = exc
        except DriverError:
            for pending in part:
                try:
                    one(pending)
                except BaseException as exc:      # each caller sees its own request's failure
                    pending.error = exc
        except BaseException as exc:      # an interpreter error still reaches every caller
            for pending in part:
                pending.error = exc

    # -- the statements ---------------------------------------------------------------------------

    def _write_many(self, batch: list[_Pending]) -> None:
        rows = [{"id": p.job_id, "token": _lease(p).token, "name": _step(p).name,
                 "attempt": _step(p).attempt, "result": _step(p).result.decode(),
                 "duration": _step(p).duration_ms} for p in batch]
        params = {**self._db.now(), "rows": orjson.dumps(rows).decode(),
                  "ids": sorted({p.job_id for p in batch})}
        with self._db.step_cursor() as cur:
            cur.execute(self._db.sql["step_put_many"], params, prepare=False)
            written = {(int(job_id), name) for job_id, name in cur.fetchall()}
        for pending in batch:
            pending.written = (pending.job_id, _step(pending).name) in written

    def _write_one(self, pending: _Pending) -> None:
        lease, step = _lease(pending), _step(pending)
        with self._db.step_cursor() as cur:
            cur.execute(self._db.sql["step_put"], {
                **self._db.now(), "id": lease.job_id, "token": lease.token, "name": step.name,
                "attempt": step.attempt, "result": step.result.decode(), "duration": step.duration_ms})
            pending.written = cur.fetchone() is not None

    def _read_many(self, batch: list[_Pending]) -> None:
        with self._db.step_cursor() as cur:
            cur.execute(self._db.sql["step_list_many"],
                        {**self._db.now(), "ids": sorted({p.job_id for p in batch})})
            rows = cur.fetchall()
        now_ms = rows[0][0]
        steps: dict[int, list[StepRecord]] = {}
        for row in rows:
            found = steps.setdefault(int(row[1]), [])
            if row[2] is not None:
                found.append(record(row[2:]))
        for pending in batch:
            pending.log = StepLog(now_ms=now_ms, steps=tuple(steps.get(pending.job_id, ())))

    def _read_one(self, pending: _Pending) -> None:
        with self._db.step_cursor() as cur:
            pending.log = read_log(cur, self._db, pending.job_id)


def record(row: tuple[Any, ...]) -> StepRecord:
    """A ``step_list`` row (without its leading now) as a ``StepRecord``."""
    (name, kind, state, seq, attempt, result, started, finished, wake, event, key, timed_out) = row
    return StepRecord(name=name, kind=kind, state=state, seq=seq, attempt=attempt, result=result,
                      started_at=started, finished_at=finished, wake_at=wake, event=event,
                      event_key=key, timed_out=timed_out)


def read_log(cur: "psycopg.Cursor[Any]", db: "PgDatabase", job_id: int) -> StepLog:
    """``step_list`` of one job on ``cur``."""
    cur.execute(db.sql["step_list"], {**db.now(), "id": job_id})
    rows = cur.fetchall()
    return StepLog(now_ms=rows[0][0], steps=tuple(record(r[1:]) for r in rows if r[1] is not None))


def _lease(pending: _Pending) -> Lease:
    assert pending.lease is not None    # a write always carries its run's lease
    return pending.lease


def _step(pending: _Pending) -> StepResult:
    assert pending.step is not None
    return pending.step
