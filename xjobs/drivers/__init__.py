"""Storage drivers behind the ``JobDriver`` seam: ``postgres`` (production), ``memory`` (tests)."""

from .base import (ClaimedJob, Enqueued, Introspection, JobDriver, JobListener, JobStore,
                   JobTransactions, JobView, Lease, ListFilter, Maintenance, Nack, NewJob,
                   QueueStore, QueueSummary)

__all__ = ["ClaimedJob", "Enqueued", "Introspection", "JobDriver", "JobListener", "JobStore",
           "JobTransactions", "JobView", "Lease", "ListFilter", "Maintenance", "Nack", "NewJob",
           "QueueStore", "QueueSummary"]
