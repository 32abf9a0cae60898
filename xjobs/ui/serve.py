"""Serving the dashboard: as a child of ``xjobsd run --ui HOST:PORT`` (the ``ui`` role), or
alone in the foreground (``xjobsd ui``).

The HTTP server is waitress (a production WSGI server in pure Python: its own parsing,
bounded worker threads, slow clients handled by its event loop). Under the daemon the
supervisor binds the listening socket before it forks anything, so a port in use is refused
at start (exit 2) like the metrics port, and a restarted ``ui`` child serves the same socket:
a connection made while it restarts waits in the backlog instead of being refused.

Nothing here is imported by the supervisor; the child imports it after the fork.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any, Sequence

from ..config import Settings
from ..registry import Registry
from ..workers.role import RoleBase, RoleContext
from .app import Dashboard
from .auth import Guard
from .listen import POLICY, ROLE, address_of

log = logging.getLogger("xjobs.ui")
THREADS = 4
POOL_SIZE = THREADS


def guard_from(settings: Settings, env: Any = None) -> Guard:
    """The token comes from the environment only: a flag would show it in ``ps``."""
    env = os.environ if env is None else env
    return Guard(token=env.get("XJOBS_UI_TOKEN") or None, trusted_header=settings.ui_trust_header,
                 actions=settings.ui_actions)


def dashboard(driver: Any, settings: Settings, registry: Registry, control: str | None) -> Dashboard:
    return Dashboard(driver, guard=guard_from(settings), tasks=registry.tasks(),
                     known_queues=tuple(sorted(registry.queues())), control=control)


def server_for(app: Any, sock: socket.socket) -> Any:
    from waitress.server import create_server
    return create_server(app, sockets=[sock], threads=THREADS, ident="xjobs", channel_timeout=60,
                         connection_limit=200, clear_untrusted_proxy_headers=True)


class DashboardRole(RoleBase):
    """The ``ui`` child: serves the dashboard on a thread; its loop has nothing else to do."""

    role = ROLE
    policy = POLICY

    def __init__(self, identity: str, *, app: Dashboard, sock: socket.socket) -> None:
        super().__init__(identity)
        self.app = app
        self.sock = sock
        self.server: Any = None
        self._thread: threading.Thread | None = None

    @classmethod
    def build_on(cls, context: RoleContext, sock: socket.socket, control: str | None) -> "DashboardRole":
        """Built in the child, on the socket the supervisor bound (``listen.role_kind``)."""
        driver = context.connect(pool_size=POOL_SIZE)
        return cls(context.identity, app=dashboard(driver, context.settings, context.registry, control),
                   sock=sock)

    def initialize(self) -> None:
        super().initialize()
        self.server = server_for(self.app, self.sock)
        self._thread = threading.Thread(target=self.server.run, name="xjobs-ui", daemon=True)
        self._thread.start()
        log.info("dashboard serving on http://%s/", address_of(self.sock))

    def wakeup_fds(self) -> Sequence[int]:
        return ()

    def run_once(self, now_ms: float) -> float:
        return 1000.0

    def close(self, deadline_monotonic_ms: float | None) -> None:
        if self.closed:
            return
        super().close(deadline_monotonic_ms)
        try:
            self.app.driver.close()
        except Exception as exc:   # closing is best effort: the process ends next
            log.debug("closing the dashboard's driver: %s", exc)
