"""The dashboard's data as JSON, under ``/api/``: what each page shows, for other tools.

Each answer is the projection the command line's ``--json`` prints (``admin``'s ``*_json`` and
``views.plain``: times as ISO-8601 in UTC), so a script reads the same fields from either:

=========================  ===========================================================
``GET /api/overview``      ``queues`` (as ``xjobsd queues ls --json``), ``throughput`` (the
                           chart's last hour, per minute and per queue), ``daemon`` (as
                           ``xjobsd status --json``; null when no daemon serves this)
``GET /api/queues``        ``xjobsd queues ls --json``
``GET /api/jobs``          ``jobs`` (as ``xjobsd jobs ls --json``) and ``older``, the next
                           page's ``before``; the jobs page's filters, and ``limit``
``GET /api/jobs/ID``       ``xjobsd jobs show ID --json``
``GET /api/dead``          ``groups`` (the dead letters page) and ``jobs`` (as ``xjobsd jobs
                           dead --json``, ``limit`` of them)
``GET /api/running``       ``running`` (each with the ``child`` of this daemon holding it)
                           and ``older``, the next page's ``before`` and ``started``
``GET /api/schedules``     ``leader`` and ``tasks`` (as ``xjobsd tasks ls --json``),
                           ``undeclared``, ``outbox`` and ``relay``
=========================  ===========================================================

Read-only: GET only, with the reads' rules (no sign-in). A refusal is
``{"error": {"code", "message"}}`` with the status the page would have.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Mapping

import orjson
from werkzeug.routing import Rule
from werkzeug.wrappers import Request, Response

from .. import admin
from ..drivers.base import JobDriver, RunningPage
from ..errors import InvalidOption
from ..views import iso, plain
from . import pages
from .params import job_id, raw_filters, start_time, where

if TYPE_CHECKING:
    from ..tasks import TaskHandle

MOST = 1000     # the most rows one answer lists

_PATHS = (("overview", "overview"), ("queues", "queues"), ("jobs", "jobs"), ("jobs/<int:job_id>", "job"),
          ("dead", "dead"), ("running", "running"), ("schedules", "schedules"))


def api_rules() -> list[Rule]:
    """The routes, new for each dashboard (a rule belongs to one map)."""
    return [Rule(f"/api/{path}", endpoint=f"api.{name}", methods=["GET"]) for path, name in _PATHS]


def is_api(request: Request) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def answer(value: object, status: int = 200) -> Response:
    return as_is(plain(value), status)


def as_is(value: object, status: int = 200) -> Response:
    """``value`` already as the command line prints it (``xjobsd status --json`` prints the
    daemon's answer as it comes)."""
    return Response(orjson.dumps(value), status=status, mimetype="application/json")


def refusal(code: str | None, message: str, status: int) -> Response:
    """``code``: the refusal's stable code; None for what the HTTP status says alone (no such
    path, a method other than GET)."""
    return answer({"error": {"code": code, "message": message}}, status)


class JsonApi:
    """The ``/api/`` endpoints of one dashboard: each reads what its page reads."""

    def __init__(self, driver: JobDriver, *, tasks: Iterable[TaskHandle], known_queues: tuple[str, ...],
                 control: str | None) -> None:
        self.driver = driver
        self.tasks = tuple(tasks)
        self.known_queues = known_queues
        self.control = control

    def overview(self, request: Request) -> Response:
        data = pages.overview(self.driver, self.known_queues, self.control)
        rates = data["rates"]
        daemon = data["daemon"]
        return as_is({**plain({"now": iso(data["now"]), "queues": data["queues"],
                               "throughput": rates.as_json()}),
                      "daemon": None if daemon is None else {k: v for k, v in daemon.items() if k != "ok"}})

    def queues(self, request: Request) -> Response:
        return answer(admin.queues(self.driver, self.known_queues))

    def jobs(self, request: Request) -> Response:
        page = where(raw_filters(request.args), limit=_limit(request, pages.PAGE_SIZE))
        if before := request.args.get("before", ""):
            page = replace(page, before_id=_id(before, "before"))
        found = pages.job_page(self.driver, page)
        return answer({"jobs": admin.jobs_json(self.driver, found["jobs"]), "older": found["older"]})

    def job(self, request: Request, job_id: int) -> Response:
        return answer(admin.job_json(self.driver, self.driver.job_get(job_id)))

    def dead(self, request: Request) -> Response:
        groups = [{**plain(g), "newest_at": iso(g.newest_at)} for g in pages.dead_letters(self.driver)["groups"]]
        views = self.driver.job_dead(_limit(request, pages.PAGE_SIZE))
        return answer({"groups": groups, "jobs": admin.jobs_json(self.driver, views)})

    def running(self, request: Request) -> Response:
        queue = (request.args.get("queue") or "").strip() or None
        page = RunningPage(queue=queue, limit=_limit(request, pages.PAGE_SIZE))
        before, started = request.args.get("before", ""), request.args.get("started", "")
        if before or started:
            at = start_time(started)
            if at is None:
                raise InvalidOption("started", "must be the start time (epoch ms) the older cursor carries")
            page = replace(page, before=(at, _id(before, "before")))
        found = pages.running(self.driver, page, self.control)
        children = found["children"]
        rows = [{**plain(row), "child": _child(children.get(row.claimed_by or ""))} for row in found["running"]]
        older = found["older"]
        return answer({"now": iso(found["now"]), "running": rows,
                       "older": None if older is None else {"started": older[0], "before": older[1]}})

    def schedules(self, request: Request) -> Response:
        found = pages.schedules(self.driver, self.tasks, self.control)
        declared = {task.name for task in self.tasks}
        return answer({**admin.tasks_json(self.driver, self.tasks),
                       "undeclared": [{"task": t["name"], "watermark": iso(t["watermark"]),
                                       "dispatched": t["dispatched"]}
                                      for t in found["tasks"] if t["name"] not in declared],
                       "outbox": found["outbox"], "relay": found["relay"]})


def _child(child: Mapping[str, object] | None) -> dict[str, object] | None:
    if child is None:
        return None
    return {key: child.get(key) for key in ("identity", "role", "queue", "pid", "state")}


def _id(text: str, option: str) -> int:
    found = job_id(text)
    if found is None:
        raise InvalidOption(option, f"must be a job id, got {text[:40]!r}")
    return found


def _limit(request: Request, default: int) -> int:
    text = request.args.get("limit", "")
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MOST:
        raise InvalidOption("limit", f"must be a whole number from 1 to {MOST}, got {text[:40]!r}")
    return int(text)
