"""A Django task as an xjobs job: its declaration, the body a worker runs, and the job read
back as Django's ``TaskResult``.

Each task function is one job, named by the task's ``module_path`` (``shop.tasks.send_receipt``)
on the task's ``queue_name``: declared when Django builds the ``Task`` (its backend's
``validate_task``), so importing a tasks module declares its jobs in the web process and in
every worker alike. A job's queue is part of its declaration, so ``task.using(queue_name=...)``
to another queue is refused (``InvalidTask``) rather than left on a queue nothing serves.

A run's input is the envelope ``enqueue`` wrote: the call's ``args`` and ``kwargs`` (JSON, as
Django's contract says), the Django priority and ``run_after`` it was enqueued with, and a
random ``key``: every ``enqueue()`` is a run of its own, so the key only names it. The body
calls the task function in the worker's thread; a Django database connection it opens is
closed or kept by ``CONN_MAX_AGE`` when the run ends, as a request's is.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Mapping

from ...context import Ctx
from ...drivers.base import JobView
from ...errors import UnknownJob
from ...hooks import on_worker_start, on_worker_stop
from ...registry import REGISTRY, JobHandle, job
from ...retry import Retry
from .compat import InvalidTask, Task, TaskContext, TaskError, TaskResult, TaskResultStatus

# job state -> Django's status (a TextChoices, untyped without Django's stubs): a suspended job
# has started and will go on; Django has no word for cancelled, and a cancelled task did not succeed
STATUS: dict[str, Any] = {"ready": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
                          "suspended": TaskResultStatus.RUNNING, "completed": TaskResultStatus.SUCCESSFUL,
                          "dead": TaskResultStatus.FAILED, "cancelled": TaskResultStatus.FAILED}
# the history's outcomes that are an error of the task (a cancel is one: the task did not
# succeed and this says why), and those of them that spent an attempt on a worker
_ERRORS = ("retried", "dead", "cancelled")
_ATTEMPTS = ("retried", "dead")
_FALLBACK_ERROR = "xjobs.errors.XJobsError"   # a failure that left no traceback (a lost lease)

_lock = threading.Lock()
_tasks: dict[str, Task[Any, Any]] = {}   # job name -> the task it runs, as declared


def job_name(task: Task[Any, Any]) -> str:
    return task.module_path


def declare(task: Task[Any, Any], *, retry: Retry, timeout: object) -> JobHandle:
    """The job of ``task`` (declared once per task function; the same one again is itself)."""
    name = job_name(task)
    with _lock:
        known = _tasks.get(name)
        if known is not None and known.backend != task.backend:
            raise InvalidTask(f"task {name!r} runs on the backend {known.backend!r} it is declared with; "
                              f"using(backend={task.backend!r}) would give one job two retry policies")
        if known is not None and known.queue_name != task.queue_name:
            raise InvalidTask(f"task {name!r} runs on queue {known.queue_name!r}, the queue it is declared "
                              f"with; xjobs cannot move it to {task.queue_name!r} with using(): declare a "
                              f"task of its own for that queue")
        if known is not None and known.func is task.func:
            try:
                return REGISTRY.get(name)
            except UnknownJob:   # the registry was emptied (a reload imports the app again)
                pass
        _tasks[name] = task
    # named as the task's function wherever xjobs names a job's body (the app's modules, logs)
    body = _body()
    body.__module__ = task.func.__module__
    body.__qualname__ = task.func.__qualname__
    handle = job(name=name, queue=task.queue_name, idempotency_key=_key, tenant="none", retry=retry,
                 timeout=timeout, priority=-task.priority, input=check_envelope)(body)
    on_worker_start(_worker_started)   # once per worker however many tasks: the same hook is one
    on_worker_stop(_worker_stopped)
    return handle


def task_of(name: str) -> Task[Any, Any] | None:
    """The task a job of ``name`` runs, importing its module if this process has not yet: only
    a module of an installed app, since the name comes from a row anybody may have written."""
    with _lock:
        found = _tasks.get(name)
    if found is not None:
        return found
    from django.apps import apps
    from django.utils.module_loading import import_string
    module = name.rpartition(".")[0]
    if not module or apps.get_containing_app_config(module) is None:
        return None
    try:
        candidate = import_string(name)
    except ImportError:
        return None
    if not isinstance(candidate, Task):
        return None
    with _lock:   # importing it declared it, if its backend is this one
        return _tasks.get(name)


def _key(payload: Mapping[str, Any]) -> str:
    # every enqueue is a run of its own: an envelope written elsewhere (``xjobsd enqueue``)
    # without a key gets one of its own
    return str(payload.get("key") or uuid.uuid4().hex)


def check_envelope(payload: object) -> None:
    """A run's input, refused at enqueue (``X_JOB_INPUT_INVALID``) unless it is the envelope:
    ``args`` a list and ``kwargs`` an object, each optional (``xjobsd enqueue NAME --input
    '{"args": [1]}'`` is a call of the task with 1)."""
    if not isinstance(payload, Mapping):
        raise ValueError(f"a task's input is an object with args and kwargs, got {type(payload).__name__}")
    if not isinstance(payload.get("args", []), list):
        raise ValueError("args must be a list")
    if not isinstance(payload.get("kwargs", {}), Mapping):
        raise ValueError("kwargs must be an object")


def envelope(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a run's input holds (see the module doc)."""
    run_after = task.run_after.isoformat() if task.run_after is not None else None
    return {"args": args, "kwargs": kwargs, "priority": task.priority, "run_after": run_after,
            "key": uuid.uuid4().hex}


def _as_task(task: Task[Any, Any], payload: Mapping[str, Any]) -> Task[Any, Any]:
    """``task`` as it was enqueued: its priority and ``run_after`` of that call."""
    run_after = payload.get("run_after")
    return task.using(priority=int(payload.get("priority", task.priority)),
                      run_after=datetime.fromisoformat(run_after) if isinstance(run_after, str) else None)


def _body() -> Any:
    def run_task(ctx: Ctx, payload: Mapping[str, Any]) -> Any:
        return run(ctx, payload)
    return run_task


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run(ctx: Ctx, payload: Mapping[str, Any]) -> Any:
    """One run of a task: its function called as Django calls it, with a ``TaskContext`` first
    when the task takes one (its ``attempt`` is the job's). The return value is the job's result;
    an exception fails the attempt, and the job's retry policy decides what follows."""
    from django.db import close_old_connections

    from .compat import task_finished, task_started
    declared = task_of(ctx.name)
    if declared is None:
        raise LookupError(f"no Django task {ctx.name!r} in this process")
    task = _as_task(declared, payload)
    args, kwargs = list(payload.get("args", ())), dict(payload.get("kwargs", {}))
    now = datetime.now(timezone.utc)
    result = result_for(task, str(ctx.job_id), args, kwargs, status=TaskResultStatus.RUNNING,
                        started=now, worker_ids=[_worker_id()] * ctx.attempt)
    close_old_connections()   # as a request does: a connection past CONN_MAX_AGE, or broken, goes
    try:
        task_started.send(sender=type(task.get_backend()), task_result=result)
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        return value
    except BaseException:
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        raise
    finally:
        object.__setattr__(result, "finished_at", datetime.now(timezone.utc))
        task_finished.send(sender=type(task.get_backend()), task_result=result)
        close_old_connections()


def result_for(task: Task[Any, Any], result_id: str, args: list[Any], kwargs: dict[str, Any], *,
               status: Any = TaskResultStatus.READY, enqueued: datetime | None = None, started: datetime | None = None,
               finished: datetime | None = None, errors: list[TaskError] | None = None,
               worker_ids: list[str] | None = None) -> TaskResult[Any]:
    """A ``TaskResult`` of ``task``; it normalises ``args`` and ``kwargs`` to JSON, or refuses them.
    (``status`` is a ``TaskResultStatus``: a Django ``TextChoices``, which no stub types here.)"""
    return TaskResult(task=task, id=result_id, status=status, enqueued_at=enqueued, started_at=started,
                      finished_at=finished, last_attempted_at=started, args=args, kwargs=kwargs,
                      backend=task.backend, errors=errors or [], worker_ids=worker_ids or [])


def when(ms: float | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)


def read_back(view: JobView, task: Task[Any, Any]) -> TaskResult[Any]:
    """The job ``view`` as Django's ``TaskResult``: its status, times, the errors of its failed
    attempts (the exception's class and traceback each), the workers that ran it, and what
    the body returned once it completed."""
    payload = view.payload if isinstance(view.payload, Mapping) else {}
    errors = [TaskError(exception_class_path=exception_path(e.get("traceback"), e.get("error")),
                        traceback=e.get("traceback") or str(e.get("error")))
              for e in view.history if e["outcome"] in _ERRORS and e.get("error")]
    workers = [str(e.get("by") or view.claimed_by or "") for e in view.history if e["outcome"] in _ATTEMPTS]
    if view.state in ("running", "suspended", "completed") and view.claimed_by:
        workers.append(view.claimed_by)
    result = result_for(_as_task(task, payload), str(view.id), list(payload.get("args", ())),
                        dict(payload.get("kwargs", {})), status=STATUS.get(view.state, TaskResultStatus.READY),
                        enqueued=when(view.created_at), started=when(view.started_at),
                        finished=when(view.finished_at), errors=errors, worker_ids=workers[:max(view.attempt, 0)])
    if view.state == "completed":
        object.__setattr__(result, "_return_value", view.result)
    return result


def exception_path(traceback: str | None, error: str | None) -> str:
    """The dotted path of the exception class a failure's traceback ends with, as Django's
    ``TaskError.exception_class_path`` names it (``builtins.ValueError``, ``shop.tasks.Declined``).
    Python prints the final exception last, after its frames (indented lines), as
    ``module.Class: message``, leaving out the module of builtins."""
    if not traceback:
        return _FALLBACK_ERROR
    last = traceback.rsplit("Traceback (most recent call last):\n", 1)[-1]
    line = next((ln for ln in last.splitlines() if ln and not ln[0].isspace()), "")
    head = line.split(":", 1)[0].strip()
    if not head or not all(part.isidentifier() for part in head.split(".")):
        return _FALLBACK_ERROR
    return head if "." in head else f"builtins.{head}"


# -- in each worker process ------------------------------------------------------------------

_inherited: list[object] = []   # connections opened before the fork: kept, never finalised here
_IMPORTED_IN = os.getpid()       # a worker in another process was forked from this one


def _worker_started() -> None:
    """After the fork: Django is set up (a no-op when the parent did it), and a database
    connection the parent held is let go of WITHOUT closing it: closing would end the session
    the parent (or a sibling) still uses over the same socket. The child opens its own. A
    worker in the process that declared the tasks (an in-process host, a test) inherited
    nothing: its connections are its own."""
    import django
    from django.db import connections
    django.setup()
    if os.getpid() == _IMPORTED_IN:
        return
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            _inherited.append(conn.connection)
            conn.connection = None


def _worker_stopped() -> None:
    from django.db import connections
    connections.close_all()


__all__ = ["STATUS", "check_envelope", "declare", "envelope", "exception_path", "job_name", "read_back", "result_for", "run",
           "task_of", "when"]
