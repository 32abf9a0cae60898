"""What the supervisor does for the dashboard before it forks: check the ``ui`` extra is
installed, bind the listening socket (a port in use is refused at start, exit 2), and declare
the ``ui`` role that serves it: its name, policy, stats record and build. Nothing web-related
is imported here: the supervisor stays small, and the child imports the server after the fork
(``serve.py``)."""

from __future__ import annotations

import importlib.util
import socket
from dataclasses import dataclass
from typing import Callable

from ..errors import InvalidOption
from ..options import parse_address
from ..workers.role import Role, RoleContext, RolePolicy
from ..workers.telemetry import RoleStats


@dataclass
class DashboardStats(RoleStats):
    requests: int = 0   # requests answered
    failed: int = 0     # of them, answered with a server error (5xx)

    def describe(self) -> str:
        return f"{self.requests} request(s) answered, {self.failed} with a server error"


ROLE = "ui"
# a request in flight ends by itself within the server's timeout; nothing is leased
POLICY = RolePolicy(drain="finish", stats=DashboardStats)
RUNS_APP = False   # it reads the tables, runs no body: a reload bringing new code leaves it be
NEEDS = ("werkzeug", "jinja2", "waitress")


def check_installed() -> None:
    missing = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        raise InvalidOption("ui", f"the dashboard needs the ui extra ({', '.join(missing)} missing): "
                                  f"pip install 'xjobsd[ui]'")


def bind(address: str) -> socket.socket:
    """The dashboard's listening socket; ``InvalidOption("ui")`` when it cannot be had."""
    host, port = parse_address(address, option="ui")
    try:
        return socket.create_server((host, port), backlog=128,
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise InvalidOption("ui", f"cannot listen on {address}: {exc.strerror or exc}") from None


def address_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def announce(sock: socket.socket, actions: bool) -> str:
    """Where the dashboard is and what it allows, for a banner."""
    return f"http://{address_of(sock)}/ ({'actions for who signs in' if actions else 'read-only'})"


def builder(sock: socket.socket, control: str | None) -> Callable[[RoleContext], Role]:
    """The ``ui`` role's build, serving ``sock``: what its line in the daemon's roles runs in
    the child."""
    def build(context: RoleContext) -> Role:
        from .serve import DashboardRole
        return DashboardRole.build_on(context, sock, control)
    return build
