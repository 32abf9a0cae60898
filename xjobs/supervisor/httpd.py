"""The HTTP server under ``/metrics``, ``/healthz`` and ``/readyz``: no client can stall it,
and the supervisor may fork children while it serves.

It is the standard library's ``ThreadingHTTPServer``, one daemon thread per connection, and
not an asyncio server: ``http.server`` parses the requests (asyncio has no HTTP server, so we
would be writing a parser), a thread blocked on a slow client delays nobody else, and a fork
copies no event loop (asyncio would leave its epoll fd and self-pipe in every child). What
the standard server lacks for a probe that must answer in milliseconds, this module adds:

* a bound: at most ``max_connections`` connections are open at once, so a flood of slow
  clients costs a bounded number of threads. One beyond the bound is closed at once rather
  than queued behind the slow ones, so its client learns at once instead of timing out.
* a deadline: a connection lives at most ``request_timeout_s`` (HTTP/1.0, one request each).
  Every read and write times out after that long, and a sweep on the accept thread shuts
  down any connection older than that, so a client trickling a byte at a time is cut off too.
* a real listen backlog (``request_queue_size``) instead of socketserver's 5.
* fork safety: the open connections are tracked under one lock that a fork takes as well
  (``os.register_at_fork``), so a fork never lands between an accept and its tracking, nor
  between an untracking and its close: ``close_in_child`` drops every socket the child got.

A connection is ended with ``shutdown`` before its close: shutdown acts on the socket itself,
whatever process still holds a copy of the fd, so a client never waits on a child.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any

log = logging.getLogger("xjobs.supervisor.httpd")


class Connections:
    """The accepted, not yet closed connections, each with its deadline (``time.monotonic``).

    Used by the accept thread (accept, sweep), every handler thread (close), ``stop`` and the
    forking thread, so every change happens under ``lock``; each holder only makes a
    non-blocking system call (accept on a non-blocking listener, shutdown, close)."""

    def __init__(self, limit: int) -> None:
        self.lock = threading.Lock()
        self._limit = limit
        self._open: dict[socket.socket, float] = {}
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)

    def __len__(self) -> int:
        return len(self._open)

    def accept(self, listener: socket.socket, deadline: float) -> tuple[socket.socket, Any]:
        """Accept one connection and track it; raises OSError when there is none to accept or
        the bound is reached (socketserver's ``get_request`` contract for "nothing to serve")."""
        with self.lock:
            conn, address = listener.accept()
            if len(self._open) >= self._limit:
                conn.close()
                raise ConnectionRefusedError(f"already serving {self._limit} connections")
            self._open[conn] = deadline
        return conn, address

    def close(self, conn: socket.socket) -> None:
        """End and forget one connection. Closed before it is forgotten, under the lock, so a
        concurrent sweep never shuts down an fd number that another socket has reused."""
        with self.lock:
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass   # the client is gone already, or the sweep got there first
            conn.close()
            self._open.pop(conn, None)

    def shutdown(self, expired_at: float | None = None) -> None:
        """Shut down every connection (or those whose deadline is past ``expired_at``): its
        handler thread wakes from its read or write, and closes it as it ends."""
        with self.lock:
            for conn, deadline in self._open.items():
                if expired_at is None or deadline <= expired_at:
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def drop_in_child(self, listener: socket.socket) -> None:
        """In a fresh child: close the inherited fds of the listener and of every connection.
        Detached first, so no copy of a socket object can later close a reused fd number."""
        with self.lock:
            for sock in (listener, *self._open):
                try:
                    os.close(sock.detach())
                except OSError:
                    pass
            self._open.clear()


# every live Connections, so a fork can hold all their locks (weak: a stopped endpoint goes)
_REGISTRY: "weakref.WeakSet[Connections]" = weakref.WeakSet()
_REGISTRY_LOCK = threading.Lock()
_HELD: list[Connections] = []


def _before_fork() -> None:
    _REGISTRY_LOCK.acquire()
    _HELD.extend(_REGISTRY)
    for connections in _HELD:   # only the forking thread ever holds two: no lock order to break
        connections.lock.acquire()


def _after_fork() -> None:
    for connections in _HELD:
        connections.lock.release()
    _HELD.clear()
    _REGISTRY_LOCK.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


class BoundedHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True        # a thread still on a client never holds up the exit
    block_on_close = False       # stop ends connections with shutdown; it never joins threads
    request_queue_size = 1024    # the listen backlog (the kernel caps it at net.core.somaxconn)

    def __init__(self, address: tuple[str, int], handler: type[http.server.BaseHTTPRequestHandler],
                 *, request_timeout_s: float, max_connections: int) -> None:
        self.request_timeout_s = request_timeout_s
        self.connections = Connections(max_connections)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)
        # a client that resets between select and accept must not block the thread in accept
        self.socket.setblocking(False)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.connections.accept(self.socket, time.monotonic() + self.request_timeout_s)
        conn.settimeout(self.request_timeout_s)
        return conn, address

    def service_actions(self) -> None:
        # serve_forever calls this after every request and every poll interval
        self.connections.shutdown(expired_at=time.monotonic())

    def shutdown_request(self, request: Any) -> None:
        self.connections.close(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):   # a client that hung up or ran out of time: its business
            log.debug("metrics client %s: %s", client_address, error)
        else:
            log.warning("metrics request from %s failed", client_address, exc_info=True)

    def close_in_child(self) -> None:
        self.connections.drop_in_child(self.socket)
