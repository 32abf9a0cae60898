"""Job declarations: ``@job(...)`` turns a function into a ``JobHandle`` and registers it.

A job's name is durable: queued, retrying and dead rows carry it. It defaults to the
function's name; two different handlers on one name are ``X_JOB_DUPLICATE`` at declaration.
``idempotency_key`` and ``tenant`` are required: the key because a job system without one
double-runs on every client retry, the tenant because the dedupe namespace and the run's
scope both depend on it (``tenant="none"`` is the explicit opt-out).

A key is held while its job is live (ready, running, suspended). ``dedupe_window="24h"``
keeps it for that long after the job COMPLETED, the way payment APIs keep idempotency keys:
a client that retries an enqueue after the work is done gets the finished job back
(``deduped=True``) instead of a second run. A dead or cancelled job never holds its key.
"""

from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Protocol, TypeVar

from . import aging as aging_options, fairness, keyed as keyed_options
from .errors import (DuplicateJob, IdempotencyKeyRequired, InputInvalid, InvalidOption, PayloadInvalid,
                     TenantRequired, UnknownJob)
from .fairness import Fairness, declare as fairness_of
from .options import duration_ms, finite_count, plain_name
from .sites import same_body, written_at
from .rate_keys import RateLimit, declared_rate, rate_key_for
from .retry import DEFAULT_RETRY, ErrorTypes, Retry, check_error_types
from .snooze import DEFAULT_MAX_SNOOZES, SnoozePolicy, declared_policy

if TYPE_CHECKING:
    from .connections import AsyncJoinable, Joinable
    from .context import Ctx
    from .reads import Enqueued
    from .reporting import ErrorHook
    from .scans import ScanHandle
    from .tasks import TaskHandle

Body = Callable[["Ctx", Any], Any]   # a job's body: (ctx, input), a def or an async def

_MAX_KEY = 1024
NO_TENANT = "none"


class JobHandle:
    """What ``@job`` returns: enqueue with ``handle.enqueue(input)``; ``handle.fn`` is the body."""

    def __init__(self, fn: Body, *, name: str, queue: str,
                 idempotency_key: Callable[[Any], str], tenant: Any, retry: Retry,
                 timeout_ms: float | None, concurrency: int | None, priority: int,
                 dedupe_window_ms: float | None = None, step_timeout_ms: float | None = None,
                 event_poll_ms: float | None = None, retry_on: ErrorTypes = (),
                 terminal_on: ErrorTypes = (), input: Any = None, cross_tenant: bool = False,
                 keyed: keyed_options.KeyedConcurrency | None = None, fairness: Fairness | None = None,
                 snoozing: SnoozePolicy = SnoozePolicy(), rate: RateLimit | None = None,
                 aging_ms: float | None = None) -> None:
        self.fn = fn
        self._built: object = None    # job()'s proof, for the registry
        self.name = name
        self.queue = queue
        self.is_async = inspect.iscoroutinefunction(fn)
        self._key = idempotency_key
        self._tenant = tenant
        self.retry = retry
        self.timeout_ms = timeout_ms
        self.concurrency = concurrency            # the fleet-wide cap of the job's runs (slots)
        self.keyed = keyed                        # concurrency by key instead (keyed.py)
        self.priority = priority
        self.dedupe_window_ms = dedupe_window_ms
        self.step_timeout_ms = step_timeout_ms    # the ceiling of each ctx.step.run call
        self.event_poll_ms = event_poll_ms        # a suspended wait looks again at least this often
        self._input = input                       # the input= validator (see validate)
        self.retry_on = retry_on                  # exception types: only these retry (when given)
        self.terminal_on = terminal_on            # exception types that dead-letter at once
        self.cross_tenant = cross_tenant          # its runs may open ctx.cross_tenant (declared, reviewed)
        self.fairness = fairness                  # job(fairness=): the key its claims are shared by
        self.snoozing = snoozing                  # max_snoozes, debounce (snooze.py)
        self.rate = rate                          # job(rate=, rate_key=): starts per key per window, fleet-wide
        self.aging_ms = aging_ms                  # job(aging=): the step its queue's priorities improve by
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<job {self.name!r} queue={self.queue!r}>"

    def _derive(self, what: str, fn: Callable[[Any], Any], input: Any) -> Any:
        try:
            return fn(input)
        except Exception as exc:  # a malformed input, reported as such rather than as a crash
            if not isinstance(input, dict):   # the usual cause: say it, rather than blame the function
                raise PayloadInvalid(f"job {self.name!r}: input must be a JSON object, got "
                                     f"{type(input).__name__} {_shown(input)} ({what}(input) raised "
                                     f"{type(exc).__name__}: {exc})") from exc
            raise PayloadInvalid(f"job {self.name!r}: {what}(input) raised {type(exc).__name__}: {exc}") from exc

    def validate(self, input: Any) -> Any:
        """The input as it is stored: ``input=`` a pydantic model class validates and dumps it
        as JSON data; a callable raises to refuse it, and what it returns (unless None)
        replaces it. Refused with ``X_JOB_INPUT_INVALID``, before anything is written."""
        check = self._input
        if check is None:
            return input
        try:
            if _is_model(check):
                return check.model_validate(input).model_dump(mode="json")
            checked = check(input)
        except Exception as exc:
            raise InputInvalid(f"job {self.name!r}: the input was refused by its validator: "
                               f"{type(exc).__name__}: {exc}") from exc
        return input if checked is None else checked

    def key_for(self, input: Any) -> str:
        key = self._derive("idempotency_key", self._key, input)
        if not isinstance(key, str) or not key:
            raise IdempotencyKeyRequired(f"job {self.name!r}: idempotency_key must return a non-empty string, got {key!r}")
        if len(key) > _MAX_KEY:
            raise InvalidOption("idempotency_key", f"job {self.name!r}: key longer than {_MAX_KEY} characters")
        if "\x00" in key:
            raise InvalidOption("idempotency_key", f"job {self.name!r}: key holds a NUL character")
        return key

    def tenant_for(self, input: Any) -> str | None:
        if self._tenant == NO_TENANT:
            return None
        tenant = self._derive("tenant", self._tenant, input)
        if tenant is None or tenant == "":
            raise TenantRequired(f"job {self.name!r}: tenant() returned {tenant!r} for this input")
        tenant = str(tenant)
        if "\x00" in tenant or len(tenant) > _MAX_KEY:
            raise InvalidOption("tenant", f"job {self.name!r}: a tenant is at most {_MAX_KEY} characters without NUL")
        return tenant

    def fair_key_for(self, input: Any, tenant: str | None) -> str | None:
        return None if self.fairness is None else fairness.key_for(self.fairness, self.name, tenant, input)

    @property
    def declared(self) -> fairness.Declared:
        return fairness.Declared(self.name, self.queue, self.fairness)

    def rate_key_for(self, input: Any) -> str | None:
        return rate_key_for(self.name, self.rate, input)

    def enqueue(self, input: Any, *, delay: object = None, run_at: object = None,
                priority: int | None = None, conn: Joinable | None = None,
                enqueued_by: str | None = None) -> Enqueued:
        """Enqueue one run; with ``conn=`` the job exists only if the caller's transaction commits."""
        from .enqueue import enqueue_many
        return enqueue_many(self, [input], delay=delay, run_at=run_at, priority=priority,
                            conn=conn, enqueued_by=enqueued_by)[0]

    def enqueue_many(self, inputs: Iterable[Any], *, delay: object = None, run_at: object = None,
                     priority: int | None = None, conn: Joinable | None = None,
                     enqueued_by: str | None = None) -> list[Enqueued]:
        """Enqueue many runs in one round trip; answers one ``Enqueued`` per input, in order."""
        from .enqueue import enqueue_many
        return enqueue_many(self, list(inputs), delay=delay, run_at=run_at, priority=priority,
                            conn=conn, enqueued_by=enqueued_by)

    async def aenqueue(self, input: Any, *, delay: object = None, run_at: object = None,
                       priority: int | None = None, conn: AsyncJoinable | None = None,
                       enqueued_by: str | None = None) -> Enqueued:
        """``enqueue``, awaited; with ``conn=`` (an ``AsyncConnection`` or ``AsyncSession``) the
        job exists only if that transaction commits."""
        from .enqueue import aenqueue_many
        return (await aenqueue_many(self, [input], delay=delay, run_at=run_at, priority=priority,
                                    conn=conn, enqueued_by=enqueued_by))[0]

    async def aenqueue_many(self, inputs: Iterable[Any], *, delay: object = None, run_at: object = None,
                            priority: int | None = None, conn: AsyncJoinable | None = None,
                            enqueued_by: str | None = None) -> list[Enqueued]:
        """``enqueue_many``, awaited."""
        from .enqueue import aenqueue_many
        return await aenqueue_many(self, list(inputs), delay=delay, run_at=run_at, priority=priority,
                                   conn=conn, enqueued_by=enqueued_by)


class _Declaration(Protocol):
    """A task or a scan as the registry holds it: its name and its declaration."""
    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> object: ...


_Declared = TypeVar("_Declared", bound=_Declaration)


class Registry:
    def __init__(self) -> None:
        # what wraps every run of this registry's jobs (``run_context``): ctx -> a context manager
        self.run_context: Callable[[Any], ContextManager[Any]] | None = None
        # called for every failed attempt (``xjobs.on_error``): (ctx, error, verdict)
        self.error_hooks: list[ErrorHook] = []
        # what each worker runs after the fork and at its close (``xjobs.on_worker_start``/``_stop``)
        self.worker_start: list[Callable[[], object]] = []
        self.worker_stop: list[Callable[[], object]] = []
        self._jobs: dict[str, JobHandle] = {}
        self._tasks: dict[str, TaskHandle] = {}
        self._scans: dict[str, ScanHandle] = {}
        self._lock = threading.Lock()

    # Registration is not public API: ``job()``, ``task()`` and ``scan()`` are the one way in,
    # and each handle carries the proof (``BUILT``) that its declaration built and checked it.

    def _add(self, handle: JobHandle) -> JobHandle:
        _proven(handle, JobHandle, "job()")
        with self._lock:
            existing = self._jobs.get(handle.name)
            if existing is not None and not same_body(existing.fn, handle.fn):
                raise DuplicateJob(f"two different handlers declare the job name {handle.name!r}: "
                                   f"{written_at(existing.fn)} and {written_at(handle.fn)}")
            fairness.check_queue(handle.declared, (h.declared for h in self._jobs.values()))
            aging_options.check_queue(handle, self._jobs.values())
            self._jobs[handle.name] = handle
            return handle

    def get(self, name: str) -> JobHandle:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJob(f"no job named {name!r} is registered") from None

    def jobs(self) -> list[JobHandle]:
        """Sorted by code point, so every listing and manifest is stable."""
        return [self._jobs[name] for name in sorted(self._jobs)]

    def queues(self) -> list[str]:
        return sorted({h.queue for h in self._jobs.values()})

    def _add_task(self, handle: TaskHandle) -> TaskHandle:
        """Register a ``TaskHandle``; the same declaration twice (a module imported twice) is
        one task, two different ones under one name are refused."""
        from .tasks import TaskHandle
        _proven(handle, TaskHandle, "task()")
        return self._add_declared(self._tasks, handle, "task", "X_TASK_DUPLICATE")

    def _add_scan(self, handle: ScanHandle) -> ScanHandle:
        """Register a ``ScanHandle``; one declaration twice is one scan, two different ones
        under one name are refused."""
        from .scans import ScanHandle
        _proven(handle, ScanHandle, "scan()")
        return self._add_declared(self._scans, handle, "scan", "X_SCAN_DUPLICATE")

    def _add_declared(self, table: dict[str, _Declared], handle: _Declared, kind: str,
                      code: str) -> _Declared:
        """A task or scan is its ``spec``: an equal one under the same name is the same."""
        with self._lock:
            existing = table.get(handle.name)
            if existing is not None and existing.spec != handle.spec:
                raise DuplicateJob(f"two different declarations of the {kind} {handle.name!r}", code=code)
            table[handle.name] = handle
            return handle

    def scans(self) -> list[ScanHandle]:
        """Sorted by code point, like ``jobs()``."""
        return [self._scans[name] for name in sorted(self._scans)]

    def tasks(self) -> list[TaskHandle]:
        """Sorted by code point, like ``jobs()``."""
        return [self._tasks[name] for name in sorted(self._tasks)]

    def clear(self) -> None:
        with self._lock:
            self._jobs.clear()
            self._tasks.clear()
            self._scans.clear()

    def snapshot(self) -> "Registry":
        """A copy of every declaration and hook: what ``restore`` puts back when importing the
        app again fails half-way (``supervisor/appcode.py``)."""
        copy = Registry()
        copy.restore(self)
        return copy

    def restore(self, saved: "Registry") -> None:
        """Hold exactly what ``saved`` holds (``Registry()``: nothing), replacing everything."""
        with self._lock:
            self._jobs, self._tasks, self._scans = dict(saved._jobs), dict(saved._tasks), dict(saved._scans)
            self.run_context, self.error_hooks = saved.run_context, list(saved.error_hooks)
            self.worker_start, self.worker_stop = list(saved.worker_start), list(saved.worker_stop)


BUILT = object()   # set by job(), task() and scan() on what they built: the registry's proof


def _proven(handle: Any, kind: type, by: str) -> None:
    if not isinstance(handle, kind) or getattr(handle, "_built", None) is not BUILT:
        raise InvalidOption("registry", f"only {by} registers a {kind.__name__}; "
                                        f"declare it with xjobs.{by[:-2]}(...)")


def _shown(value: Any, most: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= most else text[:most] + "..."


def _is_model(value: Any) -> bool:
    """A pydantic (v2) model class, recognised without importing pydantic."""
    return isinstance(value, type) and callable(getattr(value, "model_validate", None)) and hasattr(value, "model_dump")


REGISTRY = Registry()
_MISSING = object()


def job(*, queue: str = "default", idempotency_key: Any = _MISSING, tenant: Any = _MISSING,
        name: str | None = None, retry: Retry | None = None, timeout: object = None,
        concurrency: int | None = None, priority: int = 0, dedupe_window: object = None,
        step_timeout: object = None, event_poll: object = None, retry_on: object = (),
        terminal_on: object = (), input: Any = None, cross_tenant: bool = False,
        concurrency_key: Any = None, ordered: object = False, on_failure: object = None,
        fairness: object = None, fair_weights: object = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES, debounce: object = None, debounce_max: object = None,
        rate: str | None = None, rate_key: Callable[[Any], Any] | None = None, aging: object = None,
        registry: Registry | None = None) -> Callable[[Body], JobHandle]:
    """Declare a job. ``idempotency_key`` and ``tenant`` are required (see module doc).

    ``step_timeout``: the ceiling of each ``ctx.step.run`` call (the step is cancelled, then the attempt
    fails with ``X_STEP_TIMEOUT``). ``event_poll``: how often a job suspended in ``ctx.step.wait_for_event``
    looks for its event anyway (a send wakes it at once; this bounds how long an event inserted by other
    means goes unnoticed). Both must be positive and finite when given. ``retry_on``/``terminal_on``:
    exception classes that decide retry or dead letter for errors you did not write (see ``retry.decide``).
    ``cross_tenant=True`` declares that the job's runs may open ``ctx.cross_tenant(reason)``; a run of any
    other job is refused there (``X_TENANCY_CROSS_DENIED``). ``concurrency_key``, ``ordered``,
    ``on_failure``: at most ``concurrency`` runs per key, or a sequence (``keyed.py``).
    ``fairness``/``fair_weights``: claims shared out among tenants or keys (``fairness.py``);
    ``max_snoozes``, ``debounce``, ``debounce_max`` (``snooze.py``); ``rate``/``rate_key`` (``rate_keys.py``);
    ``aging``: the queue's waiting jobs gain a level of priority per step (``aging.py``)."""
    queue = plain_name(queue, "queue")
    rate_limit = declared_rate(rate, rate_key)
    if not isinstance(cross_tenant, bool):
        raise InvalidOption("cross_tenant", f"must be True or False, got {cross_tenant!r}")
    if idempotency_key is _MISSING or idempotency_key is None:
        raise IdempotencyKeyRequired("job(): idempotency_key is required, e.g. idempotency_key=lambda i: f\"order:{i['id']}\"")
    if not callable(idempotency_key):
        raise InvalidOption("idempotency_key", "must be a callable taking the input and returning a string")
    if tenant is _MISSING or tenant is None:
        raise TenantRequired("job(): tenant is required: a callable taking the input, or tenant=\"none\"")
    if tenant != NO_TENANT and not callable(tenant):
        raise InvalidOption("tenant", "must be a callable taking the input, or the string \"none\"")
    if retry is None:
        retry = DEFAULT_RETRY
    elif not isinstance(retry, Retry):
        raise InvalidOption("retry", "must be a Retry(...)")
    timeout_ms = None if timeout is None else duration_ms(timeout, "timeout", exclusive_minimum=True)
    keyed = keyed_options.declare(concurrency, concurrency_key, ordered, on_failure)
    if concurrency is not None and keyed is None:
        concurrency = finite_count(concurrency, "concurrency", minimum=1, maximum=1_000_000)
    elif keyed is not None:
        concurrency = None   # the cap is per key (keyed.py), not the job's slots
    priority = finite_count(priority, "priority", minimum=-32768, maximum=32767)
    dedupe_window_ms = (None if dedupe_window is None else
                        duration_ms(dedupe_window, "dedupe_window", exclusive_minimum=True))
    step_timeout_ms = (None if step_timeout is None else
                       duration_ms(step_timeout, "step_timeout", exclusive_minimum=True))
    event_poll_ms = None if event_poll is None else duration_ms(event_poll, "event_poll", exclusive_minimum=True)
    if input is not None and not (callable(input) or _is_model(input)):
        raise InvalidOption("input", "must be a callable validating the input, or a pydantic model class")
    retry_types = check_error_types(retry_on, "retry_on")
    terminal_types = check_error_types(terminal_on, "terminal_on")
    if set(retry_types) & set(terminal_types):
        raise InvalidOption("retry_on", "a class cannot be in both retry_on and terminal_on")
    fair = fairness_of(fairness, fair_weights, has_tenant=tenant != NO_TENANT)
    snoozing = declared_policy(max_snoozes, debounce, debounce_max)
    aging_ms = aging_options.declared_aging(aging)
    target = registry if registry is not None else REGISTRY

    def declare(fn: Body) -> JobHandle:
        if not callable(fn):
            raise InvalidOption("job", "decorates a function")
        job_name = plain_name(name if name is not None else fn.__name__, "name")
        handle = JobHandle(fn, name=job_name, queue=queue, idempotency_key=idempotency_key,
                           tenant=tenant, retry=retry, timeout_ms=timeout_ms,
                           concurrency=concurrency, priority=priority,
                           dedupe_window_ms=dedupe_window_ms, step_timeout_ms=step_timeout_ms,
                           event_poll_ms=event_poll_ms, retry_on=retry_types,
                           terminal_on=terminal_types, input=input, cross_tenant=cross_tenant, keyed=keyed,
                           fairness=fair, snoozing=snoozing, rate=rate_limit, aging_ms=aging_ms)
        handle._built = BUILT
        return target._add(handle)

    return declare


def run_context(fn: Callable[[Any], ContextManager[Any]], *,
                registry: Registry | None = None) -> Callable[[Any], ContextManager[Any]]:
    """Declare what wraps every run of the app's jobs, in every worker that runs them::

        @xjobs.run_context
        @contextlib.contextmanager
        def in_session(ctx):
            with Session() as session, structlog.contextvars.bound_contextvars(job_id=ctx.job_id):
                yield

    It is entered in the body's own thread (or task) after ``xjobs.current()`` is set, and
    left when the body ends, however it ends. One per registry: a second one replaces it."""
    if not callable(fn):
        raise InvalidOption("run_context", "takes a callable: ctx -> a context manager")
    (registry if registry is not None else REGISTRY).run_context = fn
    return fn
