"""xjobs: durable background jobs for Python on PostgreSQL, run by ``xjobsd``."""

from .config import Settings, configure, current_driver, load_settings
from .drivers.base import Enqueued
from .errors import RetryAfter, Terminal, XJobsError
from .registry import REGISTRY, JobHandle, Registry, job
from .retry import Retry

__all__ = ["Enqueued", "JobHandle", "REGISTRY", "Registry", "Retry", "RetryAfter", "Settings",
           "Terminal", "XJobsError", "configure", "current_driver", "job", "load_settings"]
__version__ = "0.1.0"
