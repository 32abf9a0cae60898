"""What an operator does to jobs and queues, one implementation each, for every surface that
offers it (``xjobsd jobs``, ``xjobsd queues``, ``xjobsd tasks`` and the dashboard).

Bulk verbs walk the matching jobs in id order, one bounded batch per statement (a batch
locks at most ``batch`` rows, and a table of millions is never held at once), up to the newest
job that matched when the verb began (a producer that keeps enqueueing cannot keep it going),
and record who asked in each job's history. ``dry_run`` only counts. A retry skips a job whose idempotency
key a live job holds again (requeueing it would break the key's promise) and says how many.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Iterable

from .drivers.fair import FairPlace, fair_of
from .drivers.fanins import fanins_of
from .drivers.base import LIVE_STATES, Batch, DeadGroup, JobDriver, JobView, ListFilter
from .errors import InvalidOption, UnknownJob, UnknownQueue
from .options import duration_ms, finite_count, plain_name
from .rate_keys import rate_waiting
from .registry import REGISTRY
from .snooze import SnoozePolicy
# what a job waits for and the queues' table are the API's projection too (``xjobs.get``,
# ``xjobs.queues``): one copy, there
from .views import WaitingFor as WaitingFor, queues as queues, waiting_for as waiting_for
from .factories.backfill_report import by_job
from .views import iso, plain, shown, why_waiting

REQUEUABLE = ("dead", "cancelled")
DEFAULT_BATCH = 1000


@dataclass(frozen=True)
class BulkResult:
    """What a bulk verb did: ``matched`` jobs (counted up front), ``changed`` of them (retried
    or cancelled), ``skipped`` (a live job holds the key, or another process held the row),
    in ``batches`` statements. With ``dry_run`` nothing changed."""

    verb: str
    matched: int
    changed: int = 0
    skipped: int = 0
    batches: int = 0
    dry_run: bool = False

    def describe(self) -> str:
        if self.dry_run:
            return f"{self.matched} job(s) match; nothing {self.verb} (--dry-run)"
        text = f"{self.changed} job(s) {self.verb} in {self.batches} batch(es)"
        if self.skipped:
            text += f"; {self.skipped} skipped (a live job holds its key, or it changed meanwhile)"
        return text


def when(text: str | None, option: str) -> tuple[float | None, float | None]:
    """An ISO-8601 time as epoch milliseconds, or an age (``15m``: fifteen minutes ago) as a
    duration the database subtracts from its own now: ``(at_ms, ago_ms)``, one of them None."""
    if text is None:
        return None, None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None, duration_ms(text, option)
    if moment.tzinfo is None:
        raise InvalidOption(option, f"give a time zone (e.g. {text}Z or {text}+01:00)")
    return moment.timestamp() * 1000.0, None


def job_filter(*, queue: str | None = None, name: str | None = None, state: str | None = None,
               tenant: str | None = None, since: str | None = None, until: str | None = None,
               error_contains: str | None = None, parent: int | None = None, limit: int = 50) -> ListFilter:
    """The jobs an operator's filters select, as every surface spells them: ``since`` and
    ``until`` an ISO-8601 time or an age (``when``), ``error_contains`` a case-insensitive
    piece of ``last_error``, ``parent`` the job whose children to take."""
    since_ms, since_ago = when(since, "since")
    until_ms, until_ago = when(until, "until")
    return ListFilter(queue=queue, name=name, state=state, tenant=tenant, since_ms=since_ms, until_ms=until_ms,
                      since_ago_ms=since_ago, until_ago_ms=until_ago, error=error_contains, limit=limit,
                      parent_id=parent)


def retry_job(driver: JobDriver, job_id: int, *, by: str) -> JobView:
    """Put one dead or cancelled job back to ready, attempt 0; its history says who asked."""
    return driver.job_requeue(job_id, f"retried by {by}")


def cancel_job(driver: JobDriver, job_id: int, *, by: str, reason: str | None = None) -> JobView:
    """Cancel one ready, running or suspended job, or a dead one holding its key's sequence
    (``job(ordered=True, on_failure="hold")``: that lets the next member in). A running one's
    worker is told in the same transaction (and its next lease renewal tells it if that was not
    heard); its history and last error say who asked, and why."""
    return driver.job_cancel(job_id, f"cancelled by {by}" + (f": {reason}" if reason else ""))


def _checked(where: ListFilter, states: tuple[str, ...], verb: str) -> ListFilter:
    if where.state is not None and where.state not in states:
        raise InvalidOption("state", f"{verb} takes jobs in {', '.join(states)}, not {where.state!r}")
    return replace(where, before_id=None, after_id=None)


def retry_jobs(driver: JobDriver, where: ListFilter, *, by: str, dry_run: bool = False,
               batch: int = DEFAULT_BATCH) -> BulkResult:
    """Put every dead or cancelled job matching ``where`` back to ready, attempt 0."""
    where = _checked(where, REQUEUABLE, "retry")
    batch = finite_count(batch, "batch", minimum=1, maximum=10_000)
    matching = driver.job_count(where, REQUEUABLE if where.state is None else (where.state,))
    matched = matching.count
    if dry_run:
        return BulkResult("retried", matched, dry_run=True)
    changed = batches = 0
    after = 0
    while True:
        picked = driver.job_requeue_batch(Batch(where, after, matching.newest_id, batch), f"retried by {by}")
        if not picked:
            break
        batches += 1
        changed += sum(1 for _, queue in picked if queue is not None)
        after = picked[-1][0]
    return BulkResult("retried", matched, changed, max(0, matched - changed), batches)


def cancel_jobs(driver: JobDriver, where: ListFilter, *, by: str, reason: str | None = None,
                dry_run: bool = False, batch: int = DEFAULT_BATCH) -> BulkResult:
    """Cancel every ready, running or suspended job matching ``where`` (the workers running
    some are told as ``cancel_job`` tells them, once per batch each)."""
    where = _checked(where, LIVE_STATES, "cancel")
    batch = finite_count(batch, "batch", minimum=1, maximum=10_000)
    matching = driver.job_count(where, LIVE_STATES if where.state is None else (where.state,))
    matched = matching.count
    if dry_run:
        return BulkResult("cancelled", matched, dry_run=True)
    text = f"cancelled by {by}" + (f": {reason}" if reason else "")
    changed = batches = 0
    after = 0
    while True:
        ids = driver.job_cancel_batch(Batch(where, after, matching.newest_id, batch), text)
        if not ids:
            break
        batches += 1
        changed += len(ids)
        after = ids[-1]
    return BulkResult("cancelled", matched, changed, max(0, matched - changed), batches)


def group_filter(group: DeadGroup) -> ListFilter:
    """The dead letters of one group (``job_dead_groups``), exactly: same queue and name, and
    the same first characters of their error."""
    return ListFilter(queue=group.queue, name=group.name, state="dead", error_group=group.error)


def check_queue(driver: JobDriver, queue: str, declared: tuple[str, ...] | None) -> None:
    """Refuse (``X_QUEUE_UNKNOWN``) a queue that ``declared`` (the app's queues; None: no app
    at hand) does not name and that holds no live job and no pause: most likely a misspelt
    one, whose pause would stop nothing and stay listed. A surface lets its user insist."""
    known = [row["name"] for row in queues(driver, declared or ())]
    name = plain_name(queue, "queue")
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    where = "the app does not declare it, and it" if declared is not None else "it"
    listed = ", ".join(known) or "none"
    hint = (f"the queues known are: {listed}" if declared is not None else
            f"no app was given or found, so the queues known are those with jobs or paused: {listed}; "
            "pass --app MODULE")
    raise UnknownQueue(f"no queue {name!r}: {where} holds no job and is not paused"
                       + (f" (did you mean {close[0]}?)" if close else ""),
                       hint=hint)


def pause_queue(driver: JobDriver, queue: str, *, by: str) -> None:
    """No worker anywhere claims from ``queue`` until it is resumed; running jobs finish."""
    driver.queue_pause(plain_name(queue, "queue"), True, by)


def resume_queue(driver: JobDriver, queue: str, *, by: str) -> None:
    driver.queue_pause(plain_name(queue, "queue"), False, by)


def queue_row(driver: JobDriver, queue: str) -> dict[str, Any]:
    """One queue's row of ``queues``, as ``xjobsd queues pause|resume --json`` prints it."""
    return next(row for row in queues(driver, (queue,)) if row["name"] == queue)


def schedules(driver: JobDriver, tasks: Iterable[Any]) -> dict[str, Any]:
    """Every cron task of ``tasks`` (the registry's) with its next fire time (epoch ms),
    computed from its watermark (or, never dispatched, from the database's now) by the
    resolver the scheduler uses, and the fleet's scheduler leader; ``undeclared``: the
    watermarks of tasks ``tasks`` does not name (another app's, or one removed since)."""
    from .cron import DEFAULT_RESOLVER, iso as zoned
    from .workers.scheduler import ELECTION
    now = driver.clock_now_ms()
    state = {w.task: w for w in driver.schedule_state()}
    leader = driver.leader_get(ELECTION)
    rows = []
    for task in tasks:
        mark = state.get(task.name)
        upcoming = DEFAULT_RESOLVER.after(task.cron, task.tz, mark.watermark_ms if mark is not None else now)
        rows.append({"name": task.name, "cron": task.cron, "tz": task.tz, "job": task.job.name,
                     "catch_up": task.catch_up, "next_fire": upcoming,
                     "next_fire_local": zoned(upcoming, task.tz),
                     "watermark": mark.watermark_ms if mark else None,
                     "dispatched": mark.dispatched if mark else 0})
    declared = {row["name"] for row in rows}
    undeclared = [mark for name, mark in state.items() if name not in declared]
    return {"now": now, "tasks": rows, "undeclared": undeclared, "leader": None if leader is None else {
        "holder": leader.holder, "live": leader.live, "expires_at": leader.expires_at,
        "elected_at": leader.elected_at}}


# -- the JSON every surface answers: ``--json`` and the dashboard's ``/api/``, one projection each

def jobs_json(driver: JobDriver, views: list[JobView]) -> list[dict[str, Any]]:
    """Jobs as ``xjobsd jobs ls|dead --json`` print them and ``/api/jobs`` answers them: each
    job ``plain``, a backfill's run with its ledger row."""
    runs = by_job(driver) if views else {}
    listed: list[dict[str, Any]] = plain([{**plain(v), "backfill": runs[v.id]} if v.id in runs else v
                                          for v in views])
    return listed


def job_json(driver: JobDriver, view: JobView) -> dict[str, Any]:
    """One job as ``xjobsd jobs show --json`` prints it and ``/api/jobs/ID`` answers it: a
    backfill's run with its ledger row, a job of a workflow with its parent and children, a
    due job of a fair queue with its place in the rotation (``fair``)."""
    backfill = by_job(driver).get(view.id)
    rated = rate_waiting(driver, view.id)
    place = fair_place(driver, view)
    extra = {**({"backfill": backfill} if backfill is not None else {}), **(family(driver, view.id) or {}),
             **({"rate_key": {**rated, "window_opened": iso(rated["window_opened"]),
                              "waiting_until": iso(rated["waiting_until"])}}
                if rated is not None else {}),
             **({"fair": {"key": place.key, "ahead": place.ahead, "keys_ahead": place.keys_ahead,
                          "keys": place.keys}} if place is not None else {}),
             "waiting": job_waiting(driver, view, rated, place)}
    data: dict[str, Any] = plain({**shown(view), **extra})
    return data


_UNREAD: Any = object()   # job_waiting's rate key or fair place, not read by the caller yet


def job_waiting(driver: JobDriver, view: JobView, rated: dict[str, Any] | None = _UNREAD,
                place: FairPlace | None = _UNREAD) -> str | None:
    """``views.why_waiting`` of a job, told with the database's clock, the job's rate key and
    its place in a fair rotation (``rated``, ``place``: already read by the caller, None when
    the job has none; else read here), and its job's declaration in this process's registry
    (``--app``; without it a debounced job reads as scheduled, a snooze without its limit)."""
    if view.state != "ready":
        return why_waiting(view)
    return why_waiting(view, driver.clock_now_ms(), rate_waiting(driver, view.id) if rated is _UNREAD else rated,
                       fair_place(driver, view) if place is _UNREAD else place, declared_snoozing(view.name))


def fair_place(driver: JobDriver, view: JobView) -> FairPlace | None:
    """Where a ready job of a fair queue stands (``driver.fair.fair_place``); None for any
    other job, or a driver without fair claims."""
    fair = fair_of(driver)
    if fair is None or view.fair_key is None or view.state != "ready":
        return None
    return fair.fair_place(view.id)


def declared_snoozing(name: str) -> SnoozePolicy | None:
    """What the job named ``name`` declares of snoozes and debounce, if this process imported
    its declaration (None: the app is not at hand, or does not declare it)."""
    try:
        return REGISTRY.get(name).snoozing
    except UnknownJob:
        return None


def tasks_json(driver: JobDriver, tasks: Iterable[Any]) -> dict[str, Any]:
    """The cron tasks and the scheduler leader as ``xjobsd tasks ls --json`` prints them and
    ``/api/schedules`` answers them (times as ISO-8601)."""
    found = schedules(driver, tasks)
    rows = [{**row, "next_fire": iso(row["next_fire"]), "watermark": iso(row["watermark"])}
            for row in found["tasks"]]
    leader = found["leader"]
    if leader is not None:
        leader = {**leader, "expires_at": iso(leader["expires_at"]), "elected_at": iso(leader["elected_at"])}
    return {"leader": leader, "tasks": rows}


def family(driver: JobDriver, job_id: int, page: int = 20) -> dict[str, Any] | None:
    """A job's parent and its children (counts by state, the first ``page`` by id), for
    ``jobs show`` and the dashboard; None for a job with neither, or a driver without fan-ins."""
    fanins = fanins_of(driver)
    if fanins is None:
        return None
    parent = fanins.job_parent(job_id)
    children = fanins.job_children(job_id, page)
    if parent is None and not children.counts:
        return None    # a job of no workflow reads as it always did
    return {"parent": None if parent is None else {"id": parent[0], "step": parent[1]},
            "children": children.as_json()}


def live_children(driver: JobDriver, job_id: int) -> int:
    """How many of a job's children are live: what a cancel of it takes along."""
    fanins = fanins_of(driver)
    if fanins is None:
        return 0
    counts = fanins.job_children(job_id, 0).counts
    return sum(n for state, n in counts.items() if state in LIVE_STATES)


TREE_NODES = 200     # the most nodes the dashboard draws of one workflow
TREE_FANOUT = 50     # the most children drawn under one node (the rest are counted)


def workflow_tree(driver: JobDriver, job_id: int) -> dict[str, Any] | None:
    """The workflow ``job_id`` belongs to, from its root down: each node's id, name, state and
    the step that made it, its first children, and how many more it has. Bounded (``TREE_NODES``
    in all, ``TREE_FANOUT`` under one node), so a map of 10,000 draws as 50 and a count."""
    fanins = fanins_of(driver)
    if fanins is None:
        return None
    root, step, seen = job_id, None, {job_id}
    while (up := fanins.job_parent(root)) is not None and up[0] not in seen and len(seen) < 64:
        root, step = up
        seen.add(root)
    view = driver.job_get(root)
    tree: dict[str, Any] = {"id": root, "name": view.name, "state": view.state, "step": None,
                            "current": root == job_id}
    queue, drawn = [tree], 1
    while queue:
        node = queue.pop(0)
        kids = fanins.job_children(node["id"], TREE_FANOUT)
        room = max(0, TREE_NODES - drawn)
        node["children"] = [{"id": c.id, "name": c.name, "state": c.state, "step": c.step,
                             "current": c.id == job_id} for c in kids.first[:room]]
        node["more"] = sum(kids.counts.values()) - len(node["children"])
        drawn += len(node["children"])
        queue.extend(node["children"])
    return tree
