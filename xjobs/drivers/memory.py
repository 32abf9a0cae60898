"""An in-memory driver: a copy of the semantics of ``queries.sql``, one statement at a time.

``MemoryDriver`` is a ``CheckedDriver`` (``facade.py``: every verb checks its arguments,
then calls one collaborator), so it refuses exactly what the Postgres driver refuses, with
the same texts. Its collaborators share one ``MemoryTable`` (``memory_table.py``: the rows,
the indexes the SQL relies on, the one lock, now) and each mirrors its statements, method by
method:

    memory_jobs.MemoryJobs                 enqueue, claim, ack, nack, heartbeat, progress, transaction
    memory_maintenance.MemoryMaintenance   rescue lapsed leases, release a dead worker's jobs, prune
    memory_operator.MemoryOperator         list, get, cancel, requeue (one and in batches), count
    memory_queues.MemoryQueues             pause, control, summary, counts, stats
    memory_coordination.MemorySchedule,    the leader row and watermarks, the outbox, job slots
      MemoryOutbox, MemorySlots
    memory_steps.MemorySteps               durable steps and stored events

The conformance suite runs the same tests against this driver and ``PostgresDriver``, so any
drift from the SQL is a failing test, not a convenience. There is no server: the injected
clock is now in every verb, ``job_listen`` has nothing to wait on (workers poll), and
``job_transaction`` is not atomic with any database (see ``memory_jobs``).
"""

from __future__ import annotations

from ..clock import SYSTEM_CLOCK, Clock
from .facade import CheckedDriver
from .memory_coordination import MemoryOutbox, MemorySchedule, MemorySlots
from .memory_jobs import MemoryJobs, MemoryTransaction
from .memory_maintenance import MemoryMaintenance
from .memory_operator import MemoryOperator
from .memory_queues import MemoryQueues
from .memory_steps import MemorySteps
from .memory_table import MemoryTable
from .sql import check_schema_name

__all__ = ["MemoryDriver", "MemoryTransaction"]


class MemoryDriver(CheckedDriver):
    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, schema: str = "xjobs") -> None:
        """``schema`` is checked like the Postgres driver's, and otherwise unused."""
        self.schema = check_schema_name(schema)
        self.table = MemoryTable(clock)
        table = self.table
        jobs = MemoryJobs(table)
        super().__init__(storage=table, jobs=jobs, maintenance=MemoryMaintenance(table),
                         operator=MemoryOperator(table), queues=MemoryQueues(table),
                         schedule=MemorySchedule(table, jobs), outbox=MemoryOutbox(table, jobs),
                         slots=MemorySlots(table), steps=MemorySteps(table))
