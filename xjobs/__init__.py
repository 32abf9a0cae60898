"""xjobs: durable background jobs for Python on PostgreSQL, run by ``xjobsd``."""

from .config import Settings, configure, current_driver, load_settings
from .errors import RetryAfter, StepSuspension, Terminal, XJobsError
from .children import batch
from .events import asend_event, send_event
from .reads import Enqueued, aget, get, queues
from .results import aresult, result
from .context import current
from .registry import REGISTRY, JobHandle, Registry, job, run_context
from .hooks import on_worker_start, on_worker_stop
from .reporting import on_error
from .scans import scan
from .retry import DEFAULT_RETRY, Retry, retry_schedule
from .snooze import Snooze
from .tasks import TaskHandle, task
from . import webhooks
# the factories, re-exported at the front door: the one api module that may import them
# (tests/unit/test_layering.py), after everything they are built over
from .factories import backfill_requires
from .factories.backfill import backfill
from .factories.export import export_rows
from .factories.purge import DEFAULT_PURGE_CRON, PurgeTarget, purge
from .factories.webhook import webhook

__all__ = ["DEFAULT_PURGE_CRON", "DEFAULT_RETRY", "Enqueued", "JobHandle", "PurgeTarget", "REGISTRY",
           "Registry", "Retry", "RetryAfter", "Settings", "Snooze", "StepSuspension", "TaskHandle", "Terminal",
           "XJobsError", "aget", "aresult", "asend_event", "backfill", "backfill_requires", "batch", "configure",
           "current", "current_driver", "export_rows", "get", "job", "load_settings", "on_error",
           "on_worker_start", "on_worker_stop", "purge", "queues", "result", "retry_schedule",
           "run_context", "scan", "send_event", "task", "webhook", "webhooks"]
__version__ = "0.2.0.dev0"
