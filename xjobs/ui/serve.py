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

import ipaddress
import logging
import os
import socket
import threading
from typing import Any, Mapping, Sequence

from ..clock import monotonic_ms
from ..config import Settings
from ..drivers.base import JobDriver
from ..registry import Registry
from ..workers.role import RoleBase, RoleContext
from .app import Dashboard
from .auth import Guard
from .listen import POLICY, ROLE, DashboardStats, address_of

log = logging.getLogger("xjobs.ui")
THREADS = 4
POOL_SIZE = THREADS


def guard_from(settings: Settings, env: Mapping[str, str] | None = None) -> Guard:
    """The token comes from the environment only: a flag would show it in ``ps``."""
    env = os.environ if env is None else env
    return Guard(token=env.get("XJOBS_UI_TOKEN") or None, trusted_header=settings.ui_trust_header,
                 actions=settings.ui_actions)


def dashboard(driver: JobDriver, settings: Settings, registry: Registry, control: str | None,
              sock: socket.socket) -> Dashboard:
    return Dashboard(driver, guard=guard_from(settings), tasks=registry.tasks(),
                     known_queues=tuple(sorted(registry.queues())), control=control,
                     hosts=loopback_hosts(sock))


def loopback_hosts(sock: socket.socket) -> set[str] | None:
    """The Host headers a dashboard listening on loopback answers (its own address, under
    any loopback name); None for any other listener, which the operator fronts as they see fit."""
    host, port = sock.getsockname()[:2]
    if not ipaddress.ip_address(host).is_loopback:
        return None
    return {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", address_of(sock)}


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
        return cls(context.identity, app=dashboard(driver, context.settings, context.registry, control, sock),
                   sock=sock)

    def initialize(self) -> None:
        super().initialize()
        self.server = server_for(self.app, self.sock)
        self._thread = threading.Thread(target=self.server.run, name="xjobs-ui", daemon=True)
        self._thread.start()
        log.info("dashboard serving on http://%s/", address_of(self.sock))

    def wakeup_fds(self) -> Sequence[int]:
        return ()

    def stats(self) -> DashboardStats:
        return DashboardStats(**self.app.counts)

    def run_once(self, now_ms: float) -> float:
        if self._thread is not None and not self._thread.is_alive() and not self.closed:
            # the server stopped by itself: end this child, so the supervisor starts another
            raise RuntimeError("the dashboard's HTTP server stopped")
        return 1000.0

    def close(self, deadline_monotonic_ms: float | None) -> None:
        """Stop accepting, let requests in flight end (waitress' threads finish what they
        hold) until the deadline, then close the database pool."""
        if self.closed:
            return
        super().close(deadline_monotonic_ms)
        if self.server is not None:
            try:
                self.server.close()
                self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=_seconds_left(deadline_monotonic_ms))
            except Exception as exc:   # best effort: the process ends next
                log.debug("stopping the dashboard's server: %s", exc)
        try:
            self.app.driver.close()
        except Exception as exc:
            log.debug("closing the dashboard's driver: %s", exc)


def _seconds_left(deadline_monotonic_ms: float | None, most: float = 5.0) -> float:
    if deadline_monotonic_ms is None:
        return most
    return max(0.0, min(most, (deadline_monotonic_ms - monotonic_ms()) / 1000.0))
