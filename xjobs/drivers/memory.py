"""An in-memory driver: a copy of the semantics of ``queries.sql``, one statement at a time.

``MemoryDriver`` is a ``CheckedDriver`` (``facade.py``: every verb checks its arguments,
then calls the method of the same name on one of the objects below), so it refuses exactly
what the Postgres driver refuses, with the same texts. They share one ``MemoryTable``
(``memory_table.py``: the rows, the indexes the SQL relies on, the one lock, now) and each
mirrors its statements, verb by verb:

    memory_jobs.MemoryJobs                 JobStore: enqueue, claim, ack, nack, renew, progress
    memory_maintenance.MemoryMaintenance   Maintenance: rescue, release a dead worker's jobs, prune
    memory_operator.MemoryOperator         Introspection: list, get, cancel, requeue, retry from a step
    memory_queues.MemoryQueues             QueueStore: pause, control, summary, counts, stats, rates
    memory_coordination.MemorySchedule,    LeaderStore, ScheduleStore, OutboxStore, SlotStore: the
      MemoryOutbox, MemorySlots              leader row and watermarks, the outbox, job slots
    memory_steps.MemorySteps               StepStore, EventStore: durable steps and stored events
    memory_ledger.MemoryLedger             BackfillLedger (optional, ``driver.backfills``)
    memory_fanins.MemoryFanIns             FanInStore (optional, ``driver.fanins``): workflows
    memory_fair.MemoryFair                 FairClaims (optional, ``driver.fair``): claims by key
    memory_rate_keys.MemoryRateKeys        RateKeyStore (optional, ``driver.rate_keys``): rate keys
    memory_async.MemoryAsyncWrites         AsyncWrites: the same verbs, answered without I/O

The conformance suite runs the same tests against this driver and ``PostgresDriver``, so any
drift from the SQL is a failing test, not a convenience. There is no server: the injected
clock is now in every verb, ``job_listen`` has nothing to wait on (workers poll), and
``job_transaction`` is not atomic with any database (see ``memory_jobs``).
"""

from __future__ import annotations

from ..clock import SYSTEM_CLOCK, Clock
from .facade import CheckedDriver
from .memory_async import MemoryAsyncWrites
from .memory_coordination import MemoryOutbox, MemorySchedule, MemorySlots
from .memory_fair import MemoryFair
from .memory_fanins import MemoryFanIns
from .memory_jobs import MemoryJobs, MemoryTransaction
from .memory_ledger import MemoryLedger
from .memory_settlement import MemorySettlement
from .memory_maintenance import MemoryMaintenance
from .memory_operator import MemoryOperator
from .memory_queues import MemoryQueues
from .memory_rate_keys import MemoryRateKeys
from .memory_steps import MemorySteps
from .memory_keyed import MemoryKeys
from .memory_table import MemoryTable
from .sql import check_schema_name

__all__ = ["MemoryDriver", "MemoryTransaction"]


class MemoryDriver(CheckedDriver):
    def __init__(self, *, clock: Clock = SYSTEM_CLOCK, schema: str = "xjobs") -> None:
        """``schema`` is checked like the Postgres driver's, and otherwise unused."""
        self.schema = check_schema_name(schema)
        self.table = MemoryTable(clock)
        table = self.table
        MemoryKeys(table)   # the triggers of keyed rows, installed on the table
        jobs, steps = MemoryJobs(table), MemorySteps(table)
        schedule, outbox = MemorySchedule(table, jobs), MemoryOutbox(table, jobs)
        super().__init__(storage=table, jobs=jobs, maintenance=MemoryMaintenance(table),
                         operator=MemoryOperator(table, steps), queues=MemoryQueues(table),
                         leader=schedule, schedule=schedule, outbox=outbox,
                         slots=MemorySlots(table), steps=steps, events=steps,
                         writes_async=MemoryAsyncWrites(table, jobs, outbox, steps),
                         backfills=MemoryLedger(table), waits=MemorySettlement(table),
                         fanins=MemoryFanIns(table), fair=MemoryFair(table, jobs),
                         rate_keys=MemoryRateKeys(table))
