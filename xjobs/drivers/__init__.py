"""Storage drivers behind the ``JobDriver`` seam: ``postgres`` (production), ``memory`` (tests)."""

from .base import (Claim, ClaimAlone, ClaimedJob, Enqueued, Introspection, JobDriver, JobListener, JobStore,
                   JobTransactions, JobView, Lease, ListFilter, Maintenance, Nack, NewJob, QueueStore,
                   QueueSummary, SlotStore, Storage, WorkerExit)
from .base_async import AsyncWrites

__all__ = ["AsyncWrites", "Claim", "ClaimAlone", "ClaimedJob", "Enqueued", "Introspection", "JobDriver", "JobListener",
           "JobStore", "JobTransactions", "JobView", "Lease", "ListFilter", "Maintenance", "Nack", "NewJob",
           "QueueStore", "QueueSummary", "SlotStore", "Storage", "WorkerExit"]
