"""Values as operators read them, for both surfaces (the command line and the dashboard):
durations (``age``), times (``iso``), views as plain JSON (``plain``), and the words for
states. The times and the JSON are the API's projection (``views.py``), which ``xjobs.get``
answers in too. A job's state is shown as the word it is stored as (``STATES``: ``xjobsd jobs
ls`` prints it as is, so does every page); a queue's and a daemon child's are written here, once."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .drivers.records import WAITING_REASONS
from .views import iso as iso, plain as plain


def age(seconds: float | None) -> str:
    """A duration as people read it: ``4.2s``, ``3m05s``, ``2h10m``, ``1d03h``."""
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"


def queue_state(paused: bool, by: str | None) -> str:
    """A queue's state: ``active``, or ``paused by WHO`` (never a job's word, ``running``)."""
    return f"paused by {by or '?'}" if paused else "active"


# what each reason of WAITING_REASONS means, where a reader may ask (the dashboard's queue table)
WAITING_WORDS = {
    "key": "members of a concurrency key waiting for its room",
    "sequence": "members of a sequence waiting for their turn",
    "rate": "ready jobs held until their rate key's window opens",
    "snoozed": "ready jobs that snoozed, due later",
    "scheduled": "ready jobs due later: a delay, run_at, a retry's backoff or a debounce",
}


def waiting_counts(reasons: Mapping[str, int] | None) -> str:
    """A queue's jobs that wait, by reason (``xjobs_queue_waiting_jobs``), the reasons with
    any in their fixed order: ``3 key, 1 snoozed``; empty when none waits."""
    found = reasons or {}
    return ", ".join(f"{found[reason]} {reason}" for reason in WAITING_REASONS if found.get(reason))


def child_state(child: Mapping[str, Any]) -> str:
    """A daemon child's state as ``xjobsd status`` reports it, a crash loop said once."""
    state = str(child.get("state"))
    return state + (" (crash loop)" if child.get("crash_loop") and state != "crash-loop" else "")


def either(states: Iterable[str]) -> str:
    """States named in a sentence: ``ready, running or suspended``."""
    *rest, last = states
    return f"{', '.join(rest)} or {last}" if rest else last
