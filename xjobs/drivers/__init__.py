"""Storage drivers behind the ``JobDriver`` seam: ``postgres`` (production), ``memory`` (tests)."""

from .base import (Claim, ClaimAlone, ClaimedJob, Enqueued, Introspection, JobDriver, JobListener, JobStore,
                   JobTransactions, JobView, Lease, ListFilter, Maintenance, Nack, NewJob, QueueStore,
                   QueueSummary, SlotStore, Storage, WorkerExit)

__all__ = ["Claim", "ClaimAlone", "ClaimedJob", "Enqueued", "Introspection", "JobDriver", "JobListener",
           "JobStore", "JobTransactions", "JobView", "Lease", "ListFilter", "Maintenance", "Nack", "NewJob",
           "QueueStore", "QueueSummary", "SlotStore", "Storage", "WorkerExit"]
