"""Storage drivers behind the ``JobDriver`` seam: ``postgres`` (production), ``memory`` (tests)."""

from .base import (ClaimedJob, Enqueued, JobDriver, JobView, Lease, ListFilter, Nack, NewJob,
                   QueueSummary)

__all__ = ["ClaimedJob", "Enqueued", "JobDriver", "JobView", "Lease", "ListFilter", "Nack",
           "NewJob", "QueueSummary"]
