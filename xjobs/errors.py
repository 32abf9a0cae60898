"""Every failure xjobs raises on purpose carries a stable ``code``.

Callers branch on ``err.code``, never on message text: the messages are for people and may
change, the codes are part of the public contract.
"""

from __future__ import annotations


class XJobsError(Exception):
    """Base class: ``code`` is stable, ``str(err)`` is for humans."""

    code = "X_ERROR"

    def __init__(self, message: str, *, code: str | None = None, **details: object) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.args[0]}"


class InvalidOption(XJobsError, ValueError):
    """A knob, name or argument that can never be right; refused before anything is written."""

    code = "X_INVALID_OPTION"

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}", option=option)
        self.option = option
        self.reason = message


class DuplicateJob(XJobsError):
    code = "X_JOB_DUPLICATE"


class TenantRequired(XJobsError):
    code = "X_JOB_TENANT_REQUIRED"


class IdempotencyKeyRequired(XJobsError):
    code = "X_JOB_IDEMPOTENCY_KEY_REQUIRED"


class UnknownJob(XJobsError):
    code = "X_JOB_UNKNOWN"


class ClaimQueuesEmpty(XJobsError):
    code = "X_JOB_CLAIM_QUEUES_EMPTY"


class JobNotFound(XJobsError):
    code = "X_JOB_NOT_FOUND"


class NotCancellable(XJobsError):
    code = "X_JOB_NOT_CANCELLABLE"


class NotRetryable(XJobsError):
    code = "X_JOB_NOT_RETRYABLE"


class PayloadInvalid(XJobsError):
    code = "X_PAYLOAD_INVALID"


class PayloadTooLarge(XJobsError):
    code = "X_PAYLOAD_TOO_LARGE"


class ConcurrencyUnenforceable(XJobsError):
    """A job declares ``concurrency=N`` and the worker's driver cannot hold fleet-wide slots."""

    code = "X_JOB_CONCURRENCY_UNENFORCEABLE"


class LeaseLost(XJobsError):
    code = "X_JOB_LEASE_LOST"


class SlotLost(XJobsError):
    code = "X_JOB_SLOT_LOST"


class Aborted(XJobsError):
    """Raised by ``ctx.signal.raise_if_set()``; the signal's reason says who aborted."""

    code = "X_ABORTED"


class Draining(XJobsError):
    code = "X_DRAINING"


class NotConfigured(XJobsError):
    code = "X_NOT_CONFIGURED"


# -- what a job body raises to steer its own retry ---------------------------------------------


class Terminal(Exception):
    """Raise from a job body to dead-letter the job now, whatever attempts remain."""


class RetryAfter(Exception):
    """Raise from a job body to retry after ``seconds`` (still clamped by the job's policy)."""

    def __init__(self, seconds: float, message: str = "") -> None:
        super().__init__(message or f"retry after {seconds}s")
        self.seconds = seconds


class JobTimeout(XJobsError):
    code = "X_JOB_TIMEOUT"
