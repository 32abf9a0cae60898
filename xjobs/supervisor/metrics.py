"""``/metrics`` (Prometheus text: ``exposition.py``), ``/healthz`` and ``/readyz``.

The HTTP server runs in one thread of the supervisor and reads only an immutable snapshot the
arbiter publishes after each loop pass (one reference swap: no locks shared with the loop).
Counters in the snapshot come from ``Tally``, so they never go backwards across child
restarts; queue depth, oldest-ready age, jobs per state and the jobs that wait, per reason,
come from the probe's one statistics round per interval, never from a query per scrape.

* ``/healthz`` — 200 while the supervisor loop has turned recently (it turns at least once a
  second), else 503.
* ``/readyz`` — 200 while running with every slot's child up and the database reachable;
  503 with the reason otherwise (starting, draining, a child down, the database away).

The listening socket is bound before the children are forked (so a port in use is refused at
start). Requests are served concurrently by ``httpd.BoundedHTTPServer``, without any lock
shared with the loop: a slow or idle client delays nobody but itself, and is cut off after
``request_timeout_s``. A fork that happens while a connection is open copies its fd into the
child, which drops it at once (``close_in_child``).

Only what exists is exported: a role that has a gauge of its own (the scheduler's leadership,
the relay's pending rows) declares it in its ``RolePolicy`` and it is served while a child of
that role reports it, never as a constant for a role this daemon does not run.
"""

from __future__ import annotations

import http.server
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from ..errors import InvalidOption
from ..options import parse_address
from ..workers.telemetry import Histogram
from .httpd import BoundedHTTPServer

_ALIVE_WINDOW_S = 5.0
# Prometheus's default scrape timeout: no honest client needs longer for one request, and a
# slow one holds one of MAX_CONNECTIONS threads that long at most
REQUEST_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 128


@dataclass(frozen=True)
class MetricsSnapshot:
    """Every figure ``/metrics``, ``/healthz`` and ``/readyz`` serve, as the arbiter's loop last
    published it (``report.snapshot``). Counters come from ``Tally``; queue figures from the
    probe's last statistics round."""
    alive_at: float = 0.0                  # time.monotonic() of the loop pass that built it
    not_ready: str | None = "starting"     # why /readyz answers 503; None: ready
    queues: Sequence[str] = ()             # the queues a group of this daemon serves
    depth: Mapping[str, float] = field(default_factory=dict)                 # queue -> ready now
    oldest_ready_seconds: Mapping[str, float] = field(default_factory=dict)
    states: Mapping[str, Mapping[str, int]] = field(default_factory=dict)    # queue -> state -> jobs
    unknown: Mapping[str, int] = field(default_factory=dict)                 # queue -> unknown names
    waiting: Mapping[str, Mapping[str, int]] = field(default_factory=dict)   # queue -> reason -> jobs
    paused: Collection[str] = ()
    outbox: tuple[int, float] | None = None          # pending rows, age of the oldest (s)
    jobs: Mapping[tuple[str, str, str], float] = field(default_factory=dict)  # (queue, job, outcome)
    durations: Mapping[tuple[str, str], Histogram] = field(default_factory=dict)   # (queue, job)
    steps: Mapping[tuple[str, str], float] = field(default_factory=dict)      # (queue, kind)
    claim_failed: Mapping[str, float] = field(default_factory=dict)
    lease_lost: Mapping[str, float] = field(default_factory=dict)
    released: Mapping[str, float] = field(default_factory=dict)
    in_flight: Mapping[str, float] = field(default_factory=dict)
    restarts: Mapping[str, float] = field(default_factory=dict)               # role -> restarts
    crash_loop: Mapping[tuple[str, str], int] = field(default_factory=dict)   # (role, queue) -> 0/1
    children: Mapping[tuple[str, str], int] = field(default_factory=dict)     # (role, state) -> n
    role_gauges: Mapping[str, tuple[str, float]] = field(default_factory=dict)   # family -> help, value
    database_up: bool = False


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "MetricsServer"
    protocol_version = "HTTP/1.0"   # one request per connection: the deadline is the request's

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        if path == "/metrics":
            self._reply(200, *owner.exposition())
        elif path == "/healthz":
            alive = time.monotonic() - owner.snapshot().alive_at < _ALIVE_WINDOW_S
            self._reply(200 if alive else 503, b"ok\n" if alive else b"supervisor loop stalled\n")
        elif path == "/readyz":
            reason = owner.snapshot().not_ready
            if reason is None:
                self._reply(200, b"ready\n")
            else:
                self._reply(503, f"not ready: {reason}\n".encode())
        else:
            self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _reply(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass   # scrapes every few seconds would drown the log


class MetricsServer(BoundedHTTPServer):
    def __init__(self, address: tuple[str, int], owner: "MetricsEndpoint", *,
                 request_timeout_s: float, max_connections: int) -> None:
        self.owner = owner
        super().__init__(address, _Handler, request_timeout_s=request_timeout_s,
                         max_connections=max_connections)


class MetricsEndpoint:
    """The metrics listener; ``start``/``stop`` run it on a thread, ``stop`` is idempotent and
    safe before ``start``, and returns promptly whatever clients are connected."""

    def __init__(self, address: str, *, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        host, port = parse_address(address)
        if not (math.isfinite(request_timeout_s) and 0 < request_timeout_s <= 3600):
            raise InvalidOption("metrics", f"request timeout must be in (0, 3600] s, got {request_timeout_s!r}")
        if not 1 <= max_connections <= 10_000:
            raise InvalidOption("metrics", f"max connections must be 1..10000, got {max_connections!r}")
        self._snapshot = MetricsSnapshot()
        self._render: Callable[[], tuple[bytes, str]] | None = None
        try:
            self.server = MetricsServer((host, port), self, request_timeout_s=request_timeout_s,
                                        max_connections=max_connections)
        except OSError as exc:
            raise InvalidOption("metrics", f"cannot listen on {address}: {exc.strerror or exc}") from None
        bound_host, bound_port = self.server.server_address[:2]
        if isinstance(bound_host, bytes):   # an AF_UNIX-style address in the types; never for TCP
            bound_host = bound_host.decode()
        self.address = f"{bound_host}:{bound_port}"
        self._thread: threading.Thread | None = None

    def snapshot(self) -> MetricsSnapshot:
        return self._snapshot

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text of the latest snapshot, and its content type."""
        if self._render is None:
            # prometheus-client is imported by the first scrape, after the children are forked:
            # none of them serves /metrics, so none should carry it (two racing scrapes build
            # two renderers, and either serves)
            from .exposition import renderer
            self._render = renderer(self.snapshot)
        return self._render()

    def publish(self, snapshot: MetricsSnapshot) -> None:
        self._snapshot = snapshot

    def open_connections(self) -> int:
        return len(self.server.connections)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="xjobsd-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()   # the accept loop notices within its poll interval
            self._thread.join(2.0)
            self._thread = None
        self.server.connections.shutdown()   # slow clients: their threads wake up and close
        self.server.server_close()

    def close_in_child(self) -> None:
        """In a fresh child: drop the listener and every connection the fork copied."""
        self.server.close_in_child()
