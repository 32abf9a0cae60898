"""The dashboard's WSGI app behind werkzeug's test client, as the app-level tests drive it:
a browser on this machine, signed in or not, and the jobs they look at."""

from __future__ import annotations

from werkzeug.test import Client

from tests.drivers.parity import claim_one, enqueue
from xjobs.drivers.base import Nack
from xjobs.ui.app import Dashboard
from xjobs.ui.auth import CSRF_COOKIE, SESSION_COOKIE, Guard

TOKEN = "correct horse battery staple"


class Browser(Client):
    """A client that comes from 127.0.0.1, as a browser on this machine would."""

    def open(self, *args, **kw):
        kw.setdefault("environ_base", {"REMOTE_ADDR": "127.0.0.1"})
        return super().open(*args, **kw)


def client(driver, **guard) -> Client:
    return Browser(Dashboard(driver, guard=Guard(**{"token": TOKEN, "actions": True, **guard})))


def csrf_of(c: Client) -> str:
    """Visit a page for the CSRF cookie, as a browser would before posting a form."""
    c.get("/")
    cookie = c.get_cookie(CSRF_COOKIE)
    assert cookie is not None
    return cookie.value


def signed_in(driver, **guard) -> tuple[Client, str]:
    c = client(driver, **guard)
    csrf = csrf_of(c)
    answer = c.post("/login", data={"token": TOKEN, "csrf": csrf, "next": "/jobs"})
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/jobs")
    assert c.get_cookie(SESSION_COOKIE) is not None
    return c, csrf


def dead_job(driver, key: str = "k1", error: str = "boom", traceback: str | None = None) -> int:
    job_id = enqueue(driver, key)
    job = claim_one(driver)
    driver.job_nack(Nack(job.id, job.token, "dead", error=error, traceback=traceback))
    return job_id
