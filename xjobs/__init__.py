"""xjobs: durable background jobs for Python on PostgreSQL, run by ``xjobsd``."""

from .config import Settings, configure, current_driver, load_settings
from .errors import RetryAfter, StepSuspension, Terminal, XJobsError
from .events import asend_event, send_event
from .reads import Enqueued, aget, get, queues
from .context import current
from .registry import REGISTRY, JobHandle, Registry, job, run_context
from .reporting import on_error
from .scans import scan
from .retry import DEFAULT_RETRY, Retry, retry_schedule
from .tasks import TaskHandle, task
from . import webhooks
# the front door re-exports the factories (they are declared over everything above)
from .factories.webhook import webhook

__all__ = ["DEFAULT_RETRY", "Enqueued", "JobHandle", "REGISTRY", "Registry", "Retry", "RetryAfter", "Settings",
           "StepSuspension", "TaskHandle", "Terminal", "XJobsError", "aget", "asend_event", "configure", "current", "current_driver",
           "get", "job", "load_settings", "on_error", "queues", "retry_schedule", "run_context", "scan", "send_event",
           "task", "webhook", "webhooks"]
__version__ = "0.1.0"
