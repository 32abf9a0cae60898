"""The dashboard as a WSGI application: routes, request parsing, rendering and the actions.

Pages read through ``pages.py``; every action calls the function the CLI calls (``admin``),
with who asked (``auth.Guard.who``) written to each job's history. Actions are POST forms
with a CSRF token; they answer with a redirect (303) and a one-shot message cookie, so a
reload never repeats one. A bulk verb first answers with the count it would touch and a
confirmation form; only that form's second post acts.

Everything the page shows passes through Jinja's autoescaping; no statement is built from
request input (filters travel as parameters of the driver's fixed statements); every
listing is bounded (``pages.PAGE_SIZE`` jobs, 100 dead-letter groups).
"""

from __future__ import annotations

import logging
import mimetypes
import threading
from dataclasses import replace
from datetime import datetime, timezone
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from werkzeug.exceptions import HTTPException, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.utils import redirect
from werkzeug.wrappers import Request, Response

from .. import admin
from ..drivers.base import LIVE_STATES, STATES, JobDriver, RunningPage
from ..drivers.refusals import is_bigint
from ..errors import DatabaseTimeout, DriverError, JobNotFound, XJobsError
from ..formatting import WAITING_WORDS, age, child_state, either, queue_state
from . import pages, params
from .api import JsonApi, api_rules, is_api, refusal
from .params import FILTERS, raw_filters, start_time
from .params import job_id as parse_job_id
from .auth import SESSION_COOKIE, SESSION_SECONDS, Guard
from .charts import throughput_chart

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from ..tasks import TaskHandle

log = logging.getLogger("xjobs.ui")
FLASH_COOKIE = "xjobs_ui_flash"
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
                               "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _iso(ms: float | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Dashboard:
    """``Dashboard(driver, guard=Guard(...), tasks=REGISTRY.tasks(), ...)`` is a WSGI app."""

    def __init__(self, driver: JobDriver, *, guard: Guard, tasks: Iterable[TaskHandle] = (),
                 known_queues: tuple[str, ...] = (), control: str | None = None,
                 hosts: Iterable[str] | None = None) -> None:
        """``hosts``: the Host headers it answers (None: any; set for a loopback listener)."""
        self.driver = driver
        self.hosts = None if hosts is None else frozenset(h.lower() for h in hosts)
        self.counts = {"requests": 0, "failed": 0}   # what the ui child reports (failed: a 5xx)
        self._counting = threading.Lock()
        self.guard = guard
        self.tasks = tuple(tasks)
        self.known_queues = known_queues
        self.control = control
        self.env = Environment(loader=PackageLoader("xjobs.ui", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True))
        self.env.filters.update(iso=_iso, age=age, either=either, child_state=child_state,
                                first_line=_first_line)
        self.env.globals.update(states=STATES, live_states=LIVE_STATES, requeuable=admin.REQUEUABLE,
                                filters=FILTERS, queue_state=queue_state,
                                waiting_words=WAITING_WORDS)
        self.routes = Map([
            Rule("/", endpoint="overview", methods=["GET"]),
            Rule("/jobs", endpoint="jobs", methods=["GET"]),
            Rule("/jobs/<int:job_id>", endpoint="job", methods=["GET"]),
            Rule("/running", endpoint="running", methods=["GET"]),
            Rule("/dead", endpoint="dead", methods=["GET"]),
            Rule("/schedules", endpoint="schedules", methods=["GET"]),
            Rule("/login", endpoint="login", methods=["GET", "POST"]),
            Rule("/logout", endpoint="logout", methods=["POST"]),
            Rule("/jobs/<int:job_id>/retry", endpoint="retry", methods=["POST"]),
            Rule("/jobs/<int:job_id>/cancel", endpoint="cancel", methods=["POST"]),
            Rule("/queues/<name>/pause", endpoint="pause", methods=["POST"]),
            Rule("/queues/<name>/resume", endpoint="resume", methods=["POST"]),
            Rule("/bulk", endpoint="bulk", methods=["POST"]),
            Rule("/static/<path:file>", endpoint="static", methods=["GET"]),
            *api_rules(),
        ], strict_slashes=False)
        self.api = JsonApi(driver, tasks=self.tasks, known_queues=known_queues, control=control)

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        response = self.dispatch(request)
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        adapter = self.routes.bind_to_environ(request.environ)
        try:
            if self.hosts is not None and request.host.lower() not in self.hosts:
                # a name that resolves here by DNS rebinding must not read a loopback dashboard
                return self.message(request, "Unknown host", "This dashboard answers only to its own "
                                    "address.", 421)
            endpoint, values = adapter.match()
            if "job_id" in values and not is_bigint(values["job_id"]):
                raise JobNotFound(f"no job {values['job_id']}")
            handler: Callable[..., Response] = (getattr(self.api, endpoint[4:]) if endpoint.startswith("api.")
                                                else getattr(self, f"on_{endpoint}"))
            response = handler(request, **values)
        except NotFound:
            response = self.message(request, "Not found", "There is no such page.", 404)
        except HTTPException as exc:
            response = (refusal(None, exc.description or exc.name, exc.code or 400) if is_api(request)
                        else exc.get_response(request.environ))
        except JobNotFound as exc:
            response = self.message(request, "No such job", str(exc), 404, exc.code)
        except DatabaseTimeout as exc:
            response = self.message(request, "Too slow", "The database gave up on this page (statement "
                                    "timeout): narrow the filter with a state, a queue or a time range.", 503,
                                    exc.code)
        except DriverError as exc:
            log.warning("dashboard: %s %s failed in the database: %s", request.method, request.path,
                        exc.__cause__ or exc)
            response = self.message(request, "Database unavailable",
                                    "The database did not answer this page; the dashboard's log says why.", 503,
                                    exc.code)
        except XJobsError as exc:
            response = self.message(request, "Refused", str(exc), 400, exc.code)
        for header, value in _HEADERS.items():
            response.headers.setdefault(header, value)
        self.guard.remember_csrf(request, response)
        with self._counting:
            self.counts["requests"] += 1
            self.counts["failed"] += response.status_code >= 500
        return response

    def url(self, request: Request, path: str, **args: Any) -> str:
        query = urlencode({k: v for k, v in args.items() if v is not None})
        return f"{request.script_root}{path}" + (f"?{query}" if query else "")

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        flash = request.cookies.get(FLASH_COOKIE)
        page = self.env.get_template(template).render(
            url=lambda path, **a: self.url(request, path, **a), request=request,
            csrf=self.guard.csrf_token(request), actions=self.guard.actions,
            who=self.guard.who(request), can_sign_in=self.guard.can_sign_in,
            flash=flash, **context)
        response = Response(page, status=status, mimetype="text/html")
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=request.script_root or "/")
        return response

    def message(self, request: Request, title: str, text: str, status: int, code: str | None = None) -> Response:
        if is_api(request):   # a tool asked: the refusal as JSON, its code when there is one
            return refusal(code, text, status)
        return self.render(request, "message.html", status=status, title=title, text=text)

    def done(self, request: Request, to: str, text: str) -> Response:
        response = redirect(to, code=303)
        response.set_cookie(FLASH_COOKIE, text[:500], max_age=60, httponly=True, samesite="Strict",
                            path=request.script_root or "/")
        return response

    # -- pages ----------------------------------------------------------------------------------

    def on_overview(self, request: Request) -> Response:
        data = pages.overview(self.driver, self.known_queues, self.control)
        return self.render(request, "overview.html", chart=throughput_chart(data["rates"].minutes), **data)

    def on_jobs(self, request: Request) -> Response:
        raw = raw_filters(request.args)
        where = params.where(raw, limit=pages.PAGE_SIZE)
        before = request.args.get("before", "")
        if before:
            if (before_id := parse_job_id(before)) is None:
                return self.message(request, "Refused", "before must be a job id", 400)
            where = replace(where, before_id=before_id)
        return self.render(request, "jobs.html", raw=raw, **pages.job_page(self.driver, where))

    def on_running(self, request: Request) -> Response:
        queue = (request.args.get("queue") or "").strip() or None
        page = RunningPage(queue=queue, limit=pages.PAGE_SIZE)
        before, started = request.args.get("before", ""), request.args.get("started", "")
        if before or started:
            before_id, started_ms = parse_job_id(before), start_time(started)
            if before_id is None or started_ms is None:
                return self.message(request, "Refused", "before must be a job id and started its start time "
                                    "(the older link carries both)", 400)
            page = replace(page, before=(started_ms, before_id))
        return self.render(request, "running.html", queue=queue, **pages.running(self.driver, page, self.control))

    def on_job(self, request: Request, job_id: int) -> Response:
        return self.render(request, "job.html", **pages.one_job(self.driver, job_id))

    def on_dead(self, request: Request) -> Response:
        return self.render(request, "dead.html", **pages.dead_letters(self.driver))

    def on_schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", **pages.schedules(self.driver, self.tasks, self.control))

    def on_static(self, request: Request, file: str) -> Response:
        if "/" in file or file.startswith("."):
            raise NotFound()
        try:
            body = resources.files("xjobs.ui").joinpath("static", file).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound() from None
        response = Response(body, mimetype=mimetypes.guess_type(file)[0] or "application/octet-stream")
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response

    # -- signing in -------------------------------------------------------------------------------

    def on_login(self, request: Request) -> Response:
        if not self.guard.can_sign_in:
            return self.message(request, "Read-only", _read_only_text(self.guard), 403)
        if request.method == "GET":
            return self.render(request, "login.html", next=_local(request.args.get("next")))
        if (refusal := self.guard.csrf_refusal(request)) is not None:
            return self.message(request, "Refused", refusal, 403)
        if not self.guard.check_token(request.form.get("token", "")):
            return self.render(request, "login.html", status=401, next=_local(request.form.get("next")),
                               error="That is not the token.")
        response = self.done(request, self.url(request, _local(request.form.get("next"))), "Signed in.")
        response.set_cookie(SESSION_COOKIE, self.guard.session_value(), max_age=SESSION_SECONDS,
                            httponly=True, samesite="Strict", secure=request.is_secure,
                            path=request.script_root or "/")
        return response

    def on_logout(self, request: Request) -> Response:
        if (refusal := self.guard.csrf_refusal(request)) is not None:
            return self.message(request, "Refused", refusal, 403)
        response = self.done(request, self.url(request, "/"), "Signed out.")
        response.delete_cookie(SESSION_COOKIE, path=request.script_root or "/")
        return response

    # -- actions ----------------------------------------------------------------------------------

    def refusal(self, request: Request) -> Response | None:
        """Why this POST may not act (read-only, a forged form, nobody signed in), as the
        page that says so; None when it may."""
        if not self.guard.actions:
            return self.message(request, "Read-only", _read_only_text(self.guard), 403)
        if (refused := self.guard.csrf_refusal(request)) is not None:
            return self.message(request, "Refused", refused, 403)
        if self.guard.who(request) is None:
            return self.message(request, "Sign in first",
                                "Acting on jobs needs the dashboard token or a trusted proxy's user.", 401)
        return None

    def act(self, request: Request, back: str, action: Callable[[str], str]) -> Response:
        """Run ``action(by)`` for a trusted, signed-in POST and go ``back`` with its message."""
        if (refused := self.refusal(request)) is not None:
            return refused
        try:
            text = action(self.guard.who(request) or "?")
        except XJobsError as exc:
            text = str(exc)
        return self.done(request, back, text)

    def on_retry(self, request: Request, job_id: int) -> Response:
        return self.act(request, self.url(request, f"/jobs/{job_id}"),
                        lambda by: f"Job {admin.retry_job(self.driver, job_id, by=by).id} is ready again.")

    def on_cancel(self, request: Request, job_id: int) -> Response:
        reason = (request.form.get("reason") or "").strip()[:500] or None
        return self.act(request, self.url(request, f"/jobs/{job_id}"),
                        lambda by: f"Job {admin.cancel_job(self.driver, job_id, by=by, reason=reason).id} "
                                   f"is cancelled.")

    def on_pause(self, request: Request, name: str) -> Response:
        def pause(by: str) -> str:
            # the overview offers pause only on listed queues; a hand-made POST for another
            # name would leave a made-up queue listed forever, so it is refused as the CLI does
            admin.check_queue(self.driver, name, self.known_queues or None)
            admin.pause_queue(self.driver, name, by=by)
            return f"Queue {name} is paused: no worker claims from it until it is resumed."
        return self.act(request, self.url(request, "/"), pause)

    def on_resume(self, request: Request, name: str) -> Response:
        def resume(by: str) -> str:
            admin.resume_queue(self.driver, name, by=by)
            return f"Queue {name} is resumed."
        return self.act(request, self.url(request, "/"), resume)

    def on_bulk(self, request: Request) -> Response:
        """Retry or cancel every job a filter matches: first the count and a confirmation,
        then, from the confirmation's own form, the verb."""
        verb = request.form.get("verb")
        if verb not in ("retry", "cancel"):
            return self.message(request, "Refused", "verb must be retry or cancel", 400)
        raw = raw_filters(request.form)
        if all(value is None for value in raw.values()):
            return self.message(request, "Refused", "a bulk action needs at least one filter", 400)
        where = params.where(raw, limit=pages.PAGE_SIZE)
        run: Callable[..., admin.BulkResult] = admin.retry_jobs if verb == "retry" else admin.cancel_jobs
        back = self.url(request, "/jobs", **raw)
        if request.form.get("confirmed") != "yes":
            if (refused := self.refusal(request)) is not None:
                return refused
            try:
                counted = run(self.driver, where, by="", dry_run=True)
            except XJobsError as exc:
                return self.message(request, "Refused", str(exc), 400)
            return self.render(request, "confirm.html", verb=verb, raw=raw, count=counted.matched, back=back)
        return self.act(request, back, lambda by: run(self.driver, where, by=by).describe().capitalize() + ".")


def _local(path: str | None) -> str:
    """A redirect target that stays on this site (``/jobs/7``), never ``//evil.example``:
    browsers drop tabs and line breaks and read a backslash as a slash, so any of those, or
    anything with a scheme or a host, goes to the overview instead."""
    if not path or any(ord(c) < 0x21 or c in "\\\x7f" for c in path):
        return "/"
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path.startswith("//"):
        return "/"
    return path


def _first_line(text: str | None) -> str:
    """What a collapsed error or traceback shows: its first line that says anything."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def _read_only_text(guard: Guard) -> str:
    if not guard.actions:
        return "This dashboard is read-only: start it with --ui-actions (and XJOBS_UI_TOKEN) to act on jobs."
    return "Signing in needs XJOBS_UI_TOKEN set where the dashboard runs (or a trusted proxy header)."
