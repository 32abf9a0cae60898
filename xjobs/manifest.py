"""The job manifest: every job, cron task and scan an app declares, as stable, sorted JSON.

An app commits the file (``xjobsd manifest --app myapp.jobs > xjobs.manifest.json``) and CI
runs ``xjobsd manifest --app myapp.jobs --check xjobs.manifest.json``: a renamed job, a retry
policy changed by accident or a cron moved to another zone shows as a diff in review instead
of as stranded rows in production. Job names are durable (queued, retrying and dead rows carry
them), so the manifest is the closed set of names the deployed code answers for.

The projection is deterministic: jobs and tasks sorted by name (by code point), keys sorted,
durations in milliseconds, exception classes by their qualified name, callables reduced to
what they are (a derived tenant, not the function's address).
"""

from __future__ import annotations

import difflib
from typing import Any

import orjson

from .registry import NO_TENANT, JobHandle, Registry

MANIFEST_VERSION = 1


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _callable_name(value: Any) -> str:
    return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def _job(handle: JobHandle) -> dict[str, Any]:
    retry = handle.retry
    return {"name": handle.name, "queue": handle.queue, "async": handle.is_async,
            "tenant": "none" if handle._tenant == NO_TENANT else "derived",
            "priority": handle.priority, "timeout_ms": handle.timeout_ms,
            "concurrency": handle.concurrency, "dedupe_window_ms": handle.dedupe_window_ms,
            "step_timeout_ms": handle.step_timeout_ms, "event_poll_ms": handle.event_poll_ms,
            "retry": {"attempts": retry.attempts, "delay_ms": retry.delay_ms,
                      "max_delay_ms": retry.max_delay_ms, "backoff": retry.backoff,
                      "jitter": retry.jitter},
            "input": None if handle._input is None else _callable_name(handle._input),
            "cross_tenant": handle.cross_tenant, "max_snoozes": handle.snoozing.max_snoozes,
            "debounce_ms": handle.snoozing.debounce_ms, "debounce_max_ms": handle.snoozing.debounce_max_ms,
            "fairness": None if handle.fairness is None else handle.fairness.describe(),
            "retry_on": sorted(_type_name(t) for t in handle.retry_on),
            "terminal_on": sorted(_type_name(t) for t in handle.terminal_on),
            # only for a keyed job, so the manifests of the others read as they did
            **({} if handle.keyed is None else {"concurrency_key": handle.keyed.describe()}),
            **({"rate": handle.rate.describe()} if handle.rate is not None else {}),
            **({"aging_ms": handle.aging_ms} if handle.aging_ms is not None else {})}


def describe(registry: Registry) -> dict[str, Any]:
    """The manifest of ``registry`` as plain data."""
    return {"version": MANIFEST_VERSION,
            "jobs": [_job(handle) for handle in registry.jobs()],
            "tasks": [{"name": task.name, "cron": task.cron, "tz": task.tz, "job": task.job.name,
                       "catch_up": task.catch_up, "max_catch_up": task.max_catch_up}
                      for task in registry.tasks()],
            "scans": [{"name": s.name, "every_ms": s.every_ms, "fn": s.spec.fn} for s in registry.scans()]}


def render(registry: Registry) -> str:
    """The manifest as the text a repository commits: indented, keys sorted, one final newline."""
    return orjson.dumps(describe(registry), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"


def drift(committed: str, registry: Registry, label: str = "committed") -> str:
    """A unified diff from the committed text to what the code declares ('' when none)."""
    current = render(registry)
    if committed == current:
        return ""
    return "".join(difflib.unified_diff(committed.splitlines(keepends=True), current.splitlines(keepends=True),
                                        fromfile=label, tofile="the code"))


__all__ = ["MANIFEST_VERSION", "describe", "drift", "render"]
