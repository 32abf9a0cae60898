"""What ``xjobsd mcp`` answers, one method per tool, without the SDK: each answer is what the
command line's ``--json`` prints for the same question (the operator's functions in
``admin.py``, the control socket's ``status``), made plain JSON by the same ``plain``
projection when it is sent, so a model, a script and a person read the same fields.

=====================  ================================================  ===================
tool                   what it answers                                    as the command line
=====================  ================================================  ===================
``status``             the running daemon: children, queues, reload       ``xjobsd status``
``queues_list``        every queue: paused, depth, oldest ready, counts   ``xjobsd queues ls``
``jobs_list``          jobs matching filters, newest first                ``xjobsd jobs ls``
``jobs_show``          one job with its steps, history and family         ``xjobsd jobs show``
``jobs_dead``          dead letters, newest first                         ``xjobsd jobs dead``
``jobs_stats``         per queue, how many jobs are in each state         ``xjobsd jobs stats``
``throughput``         the last hour's ended and failed runs, per minute  ``/api/overview``
``tasks_list``         cron tasks, next fire, watermark, leader           ``xjobsd tasks ls``
``jobs_cancel``        cancel one live job (and its live children)        ``xjobsd jobs cancel``
``jobs_retry``         one dead or cancelled job back to ready            ``xjobsd jobs retry``
``queues_pause``       no worker anywhere claims from the queue           ``xjobsd queues pause``
``queues_resume``      workers claim from the queue again                 ``xjobsd queues resume``
=====================  ================================================  ===================

``throughput`` answers what the dashboard's ``/api/overview`` does under that key (the command
line has no such read). The last four change the fleet: ``WRITES`` names them, and the server
offers them only when started with ``--allow-writes``. Each acts on one job or one queue,
never on a filter: a bulk verb stays with the command line, where ``--dry-run`` shows what it
would touch."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Literal

from .. import admin
from ..control_client import request
from ..drivers.base import JobDriver
from ..errors import InvalidOption, XJobsError
from ..options import finite_count
from ..throughput import last_hour
from ..views import shown

if TYPE_CHECKING:
    from ..tasks import TaskHandle

READS = ("status", "queues_list", "jobs_list", "jobs_show", "jobs_dead", "jobs_stats", "throughput",
         "tasks_list")
WRITES = ("jobs_cancel", "jobs_retry", "queues_pause", "queues_resume")
# a list answer's key in the structured content, which older protocol versions take only as an object
LISTED_UNDER = {"queues_list": "queues", "jobs_list": "jobs", "jobs_dead": "jobs"}
MOST = 1000     # the most jobs one answer lists: a model's context is not a terminal's scrollback

State = Literal["ready", "running", "suspended", "completed", "dead", "cancelled"]


@dataclass
class Reach:
    """What the tools read through. The database is opened at the first tool that needs it
    (``status`` asks only the daemon), and kept: one server answers one client for as long as
    it runs. ``declared``/``tasks``: the app's queues and cron tasks, None when no app was
    given or found. ``by``: who a write says asked, in the job's history (``mcp:USER``)."""

    open_driver: Callable[[], JobDriver]
    control: str
    declared: tuple[str, ...] | None
    tasks: tuple[TaskHandle, ...] | None
    by: str
    _driver: JobDriver | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def driver(self) -> JobDriver:
        with self._lock:    # tools run on worker threads: one pool, opened once
            if self._driver is None:
                self._driver = self.open_driver()
            return self._driver

    def close(self) -> None:
        with self._lock:
            if self._driver is not None:
                self._driver.close()
                self._driver = None


class DaemonRefused(XJobsError):
    """The daemon answered the control socket with a refusal; its own code is kept."""


class Tools:
    """The tools over one ``Reach``; each method's docstring is what the client is told."""

    def __init__(self, reach: Reach) -> None:
        self.reach = reach

    def status(self) -> dict[str, Any]:
        """What the running xjobsd is doing, over its control socket: each child (role, queue,
        pid, state, in flight, completed, restarts), each queue (depth, oldest ready age),
        a reload in progress. Fails with X_DAEMON_UNAVAILABLE when no daemon answers."""
        answer = request(self.reach.control, "status")
        if not answer.pop("ok", False):
            raise DaemonRefused(str(answer.get("error", "status refused")),
                                code=str(answer.get("code") or "X_DAEMON_UNAVAILABLE"))
        return answer

    def queues_list(self) -> list[dict[str, Any]]:
        """Every queue (those the app declares, those with live jobs, those paused): paused
        and by whom, depth (ready now), oldest ready age in seconds, and live counts."""
        return admin.queues(self.reach.driver(), self.reach.declared or ())

    def jobs_list(self, queue: str | None = None, name: str | None = None, state: State | None = None,
                  tenant: str | None = None, since: str | None = None, until: str | None = None,
                  error_contains: str | None = None, parent: int | None = None, limit: int = 50,
                  before: int | None = None) -> list[dict[str, Any]]:
        """Jobs matching every filter given, newest first. since/until: an ISO-8601 time with a
        zone (2026-12-01T10:00Z) or an age (15m, 2h: that long ago), read against when a job
        finished (or was created, if it has not); error_contains: case-insensitive text of
        last_error; parent: only the children of that job; before: the page older than this
        job id; limit: at most 1000."""
        where = admin.job_filter(queue=queue, name=name, state=state, tenant=tenant, since=since, until=until,
                                 error_contains=error_contains, parent=parent,
                                 limit=finite_count(limit, "limit", maximum=MOST))
        if before is not None:
            where = replace(where, before_id=before)
        driver = self.reach.driver()
        return admin.jobs_json(driver, driver.job_list(where))

    def jobs_show(self, id: int) -> dict[str, Any]:
        """One job: its fields, payload, result, steps, history (with tracebacks), progress,
        what it waits for, and its parent and children in a workflow."""
        driver = self.reach.driver()
        return admin.job_json(driver, driver.job_get(id))

    def jobs_dead(self, limit: int = 50) -> list[dict[str, Any]]:
        """Dead letters (jobs that used up their attempts or failed terminally), newest first;
        limit: at most 1000."""
        driver = self.reach.driver()
        return admin.jobs_json(driver, driver.job_dead(finite_count(limit, "limit", maximum=MOST)))

    def jobs_stats(self) -> dict[str, Any]:
        """Per queue, how many jobs are in each state (ready, running, suspended, completed,
        dead, cancelled): the fleet's figures at a glance."""
        return dict(self.reach.driver().job_stats())

    def throughput(self) -> dict[str, Any]:
        """The last hour's runs that ended and those that failed (retried or dead), fleet-wide,
        per queue and per minute (empty minutes included): the dashboard's chart, as numbers."""
        return last_hour(self.reach.driver()).as_json()

    def tasks_list(self) -> dict[str, Any]:
        """The app's cron tasks (schedule, time zone, job, next fire, watermark, dispatched)
        and the fleet's scheduler leader. Needs the app (the server's --app)."""
        if self.reach.tasks is None:
            raise InvalidOption("app", "no app to list the tasks of: none was given, configured or found",
                                hint="start the server with --app MODULE (or XJOBS_APP)")
        return admin.tasks_json(self.reach.driver(), self.reach.tasks)

    def jobs_cancel(self, id: int, reason: str | None = None) -> dict[str, Any]:
        """Cancel one ready, running or suspended job (a running one's worker stops it; its
        live children are cancelled too). reason: kept in last_error. Answers the job."""
        return shown(admin.cancel_job(self.reach.driver(), id, by=self.reach.by, reason=reason))

    def jobs_retry(self, id: int) -> dict[str, Any]:
        """Put one dead or cancelled job back to ready, attempt 0. Answers the job."""
        return shown(admin.retry_job(self.reach.driver(), id, by=self.reach.by))

    def queues_pause(self, name: str, force: bool = False) -> dict[str, Any]:
        """Stop every worker on every machine claiming from a queue (running jobs finish),
        until it is resumed. A queue nothing declares, holds or pauses is refused
        (X_QUEUE_UNKNOWN, most likely misspelt) unless force. Answers the queue's row."""
        return self._switch(name, force, admin.pause_queue)

    def queues_resume(self, name: str, force: bool = False) -> dict[str, Any]:
        """Let workers claim from a paused queue again. Answers the queue's row."""
        return self._switch(name, force, admin.resume_queue)

    def _switch(self, name: str, force: bool, verb: Callable[..., None]) -> dict[str, Any]:
        driver = self.reach.driver()
        if not force:
            admin.check_queue(driver, name, self.reach.declared)
        verb(driver, name, by=self.reach.by)
        return admin.queue_row(driver, name)
