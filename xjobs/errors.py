"""Every failure xjobs raises on purpose carries a stable ``code``.

Callers branch on ``err.code``, never on message text: the messages are for people and may
change, the codes are part of the public contract.
"""

from __future__ import annotations


class XJobsError(Exception):
    """Base class: ``code`` is stable, ``str(err)`` is for humans."""

    code = "X_ERROR"
    hint: str | None = None
    """What to do about it, for a person (``xjobsd`` prints it after the message); not part
    of ``str(err)``, which stays the code and the message."""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None,
                 **details: object) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if hint is not None:
            self.hint = hint
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.args[0]}"


class InvalidOption(XJobsError, ValueError):
    """A knob, name or argument that can never be right; refused before anything is written."""

    code = "X_INVALID_OPTION"

    def __init__(self, option: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{option}: {message}", hint=hint, option=option)
        self.option = option
        self.reason = message


class UsageInvalid(XJobsError):
    """A command line that does not parse: an unknown flag, a missing argument or verb."""

    code = "X_USAGE"


class DuplicateJob(XJobsError):
    code = "X_JOB_DUPLICATE"


class TenantRequired(XJobsError):
    code = "X_JOB_TENANT_REQUIRED"


class IdempotencyKeyRequired(XJobsError):
    code = "X_JOB_IDEMPOTENCY_KEY_REQUIRED"


class UnknownJob(XJobsError):
    code = "X_JOB_UNKNOWN"


class UnknownQueue(XJobsError):
    """An operator's verb names a queue that nothing declares, holds jobs on or pauses."""

    code = "X_QUEUE_UNKNOWN"


class DaemonRunning(XJobsError):
    """``xjobsd run`` where another daemon, still running, recorded itself with the same
    control socket or metrics address."""

    code = "X_DAEMON_RUNNING"


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


class InputInvalid(XJobsError):
    """A job's ``input=`` validator refused an input at enqueue; nothing was written."""

    code = "X_JOB_INPUT_INVALID"


class PayloadTooLarge(XJobsError):
    code = "X_PAYLOAD_TOO_LARGE"


class JobFailed(XJobsError):
    """``xjobs.result()`` of a job that died: ``last_error`` is its last attempt's error."""

    code = "X_JOB_FAILED"

    def __init__(self, job_id: int, last_error: str | None) -> None:
        super().__init__(f"job {job_id} is dead: {last_error}", job_id=job_id, last_error=last_error)
        self.job_id, self.last_error = job_id, last_error


class JobCancelled(XJobsError):
    """``xjobs.result()`` of a job that was cancelled: ``reason`` is what the cancel said."""

    code = "X_JOB_CANCELLED"

    def __init__(self, job_id: int, reason: str | None) -> None:
        super().__init__(f"job {job_id} was cancelled" + (f": {reason}" if reason else ""),
                         job_id=job_id, reason=reason)
        self.job_id, self.reason = job_id, reason


class ResultTimeout(XJobsError, TimeoutError):
    """``xjobs.result(timeout=)`` ran out before the job settled; the job is left as it is."""

    code = "X_TIMEOUT"


class ConcurrencyUnenforceable(XJobsError):
    """A job declares ``concurrency=N`` and the worker's driver cannot hold fleet-wide slots."""

    code = "X_JOB_CONCURRENCY_UNENFORCEABLE"


class ConcurrencyKeyInvalid(XJobsError):
    """``concurrency_key(input)`` raised, or returned something other than a short string."""

    code = "X_JOB_CONCURRENCY_KEY_INVALID"


class FairnessMixed(XJobsError, ValueError):
    """Two jobs of one queue disagree on ``job(fairness=...)`` (one fair, one not) or on the
    weight of a key: a queue claims one way. Raised at the second one's declaration."""

    code = "X_JOB_FAIRNESS_MIXED"


class LeaseLost(XJobsError):
    code = "X_JOB_LEASE_LOST"


class SlotLost(XJobsError):
    code = "X_JOB_SLOT_LOST"


class Aborted(XJobsError):
    """Raised by ``ctx.signal.raise_if_set()``; the signal's reason says who aborted."""

    code = "X_ABORTED"


class StepDuplicate(XJobsError):
    """A step name used twice in one run, or recorded as another kind of step."""

    code = "X_STEP_DUPLICATE"


class ChildFailed(XJobsError):
    """A child job of a step (``ctx.step.invoke``/``map``) did not complete: it died or was
    cancelled. ``failures`` holds ``(index, child_id, state, error)`` per failed child."""

    code = "X_CHILD_FAILED"

    def __init__(self, message: str, failures: tuple[tuple[int, int, str, str | None], ...] = ()) -> None:
        super().__init__(message)
        self.failures = failures

    @property
    def cause(self) -> str | None:
        """The first failed child's state: ``dead`` or ``cancelled``."""
        return self.failures[0][2] if self.failures else None


class FanInUnavailable(XJobsError):
    """The driver has no fan-ins (``driver.fanins``): child jobs and batches need one."""

    code = "X_FANIN_UNAVAILABLE"


class StepNotFound(XJobsError):
    code = "X_STEP_NOT_FOUND"


class StepResultInvalid(XJobsError):
    """What a ``step.run`` returned cannot be stored as JSON; nothing was written."""

    code = "X_STEP_RESULT_INVALID"


class StepTimeout(XJobsError):
    """A ``step.run`` outlasted the job's ``step_timeout``: cancelled first, then failed."""

    code = "X_STEP_TIMEOUT"


class StepSuspension(BaseException):
    """How a run suspends (``ctx.step.sleep``, ``ctx.step.wait_for_event``): the job is already
    suspended in the database when this is raised, and the body unwinds. It derives from
    ``BaseException``, like ``asyncio.CancelledError``, so a body's ``except Exception`` does
    not swallow it; a body that swallows it anyway writes nothing more (its job is no longer
    running under its claim)."""

    def __init__(self, step: str, wake_at: float | None) -> None:
        super().__init__(f"suspended at step {step!r}")
        self.step = step
        self.wake_at = wake_at


class Draining(XJobsError):
    code = "X_DRAINING"


class NotConfigured(XJobsError):
    code = "X_NOT_CONFIGURED"


# -- the schema and this code ------------------------------------------------------------------


class SchemaMismatch(InvalidOption):
    """The installed schema cannot serve this code as it is: refused at start, before anything
    runs, with exit 2 like any refused configuration (a restart cannot mend it). ``installed``
    is the schema's version (0: none), ``code_version`` the one this code needs."""

    def __init__(self, message: str, *, installed: int, code_version: int) -> None:
        super().__init__("schema", message)
        self.installed = installed
        self.code_version = code_version


class SchemaTooNew(SchemaMismatch):
    """A newer xjobs upgraded the schema past this code's version, and its migrations do not
    declare that it still serves this one."""

    code = "X_SCHEMA_TOO_NEW"


class SchemaOutdated(SchemaMismatch):
    """The schema is older than this code, and this process may not upgrade it (``--no-migrate``)."""

    code = "X_SCHEMA_OUTDATED"


class MigrationBlocked(XJobsError):
    """A migration waited longer than ``lock_timeout`` for a table; it was rolled back, and the
    ones before it stay applied. Worth a retry once the holder lets go (exit 1)."""

    code = "X_MIGRATION_BLOCKED"


class MigrationPrivilegeMissing(XJobsError):
    """The role running a migration may not create or alter what it needs (the database's
    CREATE, the schema's ownership). Nothing of that migration was applied (exit 1)."""

    code = "X_MIGRATION_PRIVILEGE"


# -- the database under a driver -----------------------------------------------------------------


class DriverError(XJobsError):
    """The database failed or refused one of a driver's own statements, for a reason that is
    not in the verb's arguments (those are ``InvalidOption``). ``__cause__`` is the driver
    library's exception (psycopg's, for the Postgres driver); what a job body's own
    statements raise inside ``ctx.transaction()`` stays the library's."""

    code = "X_DATABASE_ERROR"


class DatabaseUnavailable(DriverError):
    """No connection to the database: it refused or dropped one, or none came free in the
    pool within its timeout. Worth a retry once the database answers again."""

    code = "X_DATABASE_UNAVAILABLE"


class DatabaseTimeout(DriverError):
    """The database gave up on a statement: its ``statement_timeout``, or a cancel."""

    code = "X_DATABASE_TIMEOUT"


class SchemaMissing(DriverError):
    """A statement found no table of the schema: nothing installed it yet (``migrate``)."""

    code = "X_SCHEMA_MISSING"


# -- the app's code ------------------------------------------------------------------------------


class AppInvalid(XJobsError):
    """The app's code cannot be run as it is on disk: a module fails to import (a syntax
    error, a failing import-time call), its declarations are refused, or importing it
    outlasted its deadline. A reload refused with it leaves the running children untouched."""

    code = "X_APP_INVALID"


class WorkerStartFailed(XJobsError):
    """An ``on_worker_start`` hook raised: the worker process stops before its first claim
    (under ``xjobsd`` the slot is restarted with the crash-loop back-off)."""

    code = "X_WORKER_START_FAILED"


class CrossTenantDenied(XJobsError):
    """``ctx.cross_tenant`` in a run whose job did not declare the capability."""

    code = "X_TENANCY_CROSS_DENIED"


# -- what a job body raises to steer its own retry ---------------------------------------------


class Terminal(Exception):
    """Raise from a job body to dead-letter the job now, whatever attempts remain."""


class ResultInvalid(XJobsError, Terminal):
    """A body returned what JSON cannot carry (payload.encode_result): the run fails terminally."""

    code = "X_RESULT_INVALID"


class ResultTooLarge(XJobsError, Terminal):
    """A body's encoded result is over ``max_result_bytes``: the run fails terminally."""

    code = "X_RESULT_TOO_LARGE"


class RetryAfter(Exception):
    """Raise from a job body to retry after ``seconds`` (still clamped by the job's policy)."""

    def __init__(self, seconds: float, message: str = "") -> None:
        super().__init__(message or f"retry after {seconds}s")
        self.seconds = seconds


class JobTimeout(XJobsError):
    code = "X_JOB_TIMEOUT"


class ExtraMissing(XJobsError):
    """A feature needs an optional dependency that is not installed (``pip install
    'xjobsd[EXTRA]'``, named in the message)."""

    code = "X_EXTRA_MISSING"


class ReadOnly(XJobsError):
    """A verb that changes jobs or queues, asked of a surface started to only read:
    ``xjobsd mcp`` without ``--allow-writes``."""

    code = "X_READ_ONLY"


# -- webhooks: what a delivery raises, and what a receiver's verify refuses (webhook_errors.py,
# beside the factory; they are this module's names too, and imported last: they subclass the above)
from .webhook_errors import WebhookFailed as WebhookFailed  # noqa: E402
from .webhook_errors import WebhookRefused as WebhookRefused  # noqa: E402
from .webhook_errors import WebhookSignatureInvalid as WebhookSignatureInvalid  # noqa: E402
from .webhook_errors import WebhookThrottled as WebhookThrottled  # noqa: E402
