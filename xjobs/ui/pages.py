"""What each page shows, read from the database (and, under ``xjobsd run``, the daemon's
control socket), with no HTTP in sight: the web layer (``app.py``) parses a request into
these calls and renders what they answer.

Every read is bounded and goes through a partial index or a statistic the metrics already
use: live counts per state (``queue_counts``), depth and age (``queue_summary``), the dead
letters (``jobs_dead_idx``), the per-minute outcome counts workers report (``job_rates``),
job listings newest first by id and the running jobs newest started first
(``jobs_running_idx``), each with a keyset cursor (never OFFSET, never ``count(*)`` over
finished rows).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

import orjson

from .. import admin
from ..views import key_waiting, life
from ..drivers.base import JobDriver, JobView, ListFilter, RunningPage
from ..factories.backfill_report import by_job
# the hour's throughput is every surface's (``xjobsd mcp``'s throughput tool too): one copy, there
from ..throughput import CHART_MINUTES as CHART_MINUTES, Minute as Minute, Throughput as Throughput
from ..throughput import throughput as throughput
from ..workers.outbox_relay import relay_row

PAGE_SIZE = 50
PAYLOAD_SHOWN_BYTES = 64 * 1024


def daemon_status(control: str | None) -> dict[str, Any] | None:
    """The daemon's own answer to ``xjobsd status`` (its children), when the dashboard is
    served by one; None when it is not, or it does not answer."""
    if not control:
        return None
    from ..control_client import ControlUnavailable, request
    try:
        answer = request(control, "status", timeout_s=2.0)
    except (ControlUnavailable, OSError):
        return None
    return answer if answer.get("ok") else None


def overview(driver: JobDriver, known_queues: tuple[str, ...], control: str | None) -> dict[str, Any]:
    now = driver.clock_now_ms()
    rates = throughput(driver.rate_series(CHART_MINUTES * 60_000.0), now)
    # the rows as ``xjobsd queues ls --json`` has them; the hour's figures are ``rates.per_queue``
    return {"now": now, "queues": admin.queues(driver, known_queues), "rates": rates,
            "daemon": daemon_status(control)}


def job_page(driver: JobDriver, where: ListFilter) -> dict[str, Any]:
    """One page of jobs, newest first, and the cursor of the next (older) page."""
    views = driver.job_list(where)
    older = views[-1].id if len(views) == where.limit and views else None
    return {"jobs": views, "older": older}


def running(driver: JobDriver, page: RunningPage, control: str | None) -> dict[str, Any]:
    """One page of the jobs running now, newest started first, with the cursor of the next
    (earlier started) page; under ``xjobsd run``, the child of this daemon holding each one."""
    rows = driver.job_running(page)
    older = (rows[-1].started_at, rows[-1].id) if rows and len(rows) == page.limit else None
    daemon = daemon_status(control)
    children = {c["identity"]: c for c in (daemon or {}).get("children", ()) if c.get("identity")}
    return {"now": driver.clock_now_ms(), "running": rows, "older": older, "children": children,
            "daemon": daemon is not None}


def pretty_payload(view: JobView) -> tuple[str, bool]:
    """The payload as indented JSON, cut at ``PAYLOAD_SHOWN_BYTES``; and whether it was cut."""
    text = orjson.dumps(view.payload, option=orjson.OPT_INDENT_2).decode()
    if len(text) <= PAYLOAD_SHOWN_BYTES:
        return text, False
    return text[:PAYLOAD_SHOWN_BYTES], True


def pretty_result(view: JobView) -> str | None:
    """A completed job's result as indented JSON (a result is bounded by max_result_bytes)."""
    return orjson.dumps(view.result, option=orjson.OPT_INDENT_2).decode() if view.state == "completed" else None


def one_job(driver: JobDriver, job_id: int) -> dict[str, Any]:
    view = driver.job_get(job_id)
    payload, cut = pretty_payload(view)
    return {"job": replace(view, history=life(view)), "payload": payload, "payload_cut": cut, "waiting_for": admin.waiting_for(view),
            "result": pretty_result(view), "key_waiting": key_waiting(view),
            "steps": [step.as_json() for step in view.steps],
            "backfill": by_job(driver).get(view.id),     # a backfill run's ledger row, as every surface shows it
            "family": (family := admin.family(driver, view.id)),
            "tree": admin.workflow_tree(driver, view.id) if family else None,
            "trace_id": view.traceparent.split("-")[1] if view.traceparent else None}


def dead_letters(driver: JobDriver) -> dict[str, Any]:
    return {"groups": driver.job_dead_groups(limit=100)}


def schedules(driver: JobDriver, tasks: Iterable[Any], control: str | None) -> dict[str, Any]:
    found = admin.schedules(driver, tasks)
    found["tasks"] += [{"name": mark.task, "cron": None, "tz": None, "job": None, "next_fire": None,
                        "watermark": mark.watermark_ms, "dispatched": mark.dispatched}
                       for mark in found["undeclared"]]
    summary = driver.outbox_summary()
    relay = None
    daemon = daemon_status(control)
    if daemon is not None:
        relay = relay_row(daemon.get("children", ()))
    return {**found, "outbox": summary, "relay": relay, "daemon": daemon is not None}

