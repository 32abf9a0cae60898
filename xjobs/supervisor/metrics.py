"""``/metrics`` (Prometheus text, built on prometheus-client), ``/healthz`` and ``/readyz``.

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
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

from prometheus_client.core import (CollectorRegistry, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..drivers.base import COUNTED_STATES
from ..drivers.records import WAITING_REASONS
from ..errors import InvalidOption
from ..options import parse_address
from ..workers.telemetry import DURATION_BUCKETS, STEP_COUNTS, Histogram
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


class SnapshotCollector:
    """Turns the arbiter's latest snapshot into metric families at scrape time."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[Any]:
        return []   # families are built per scrape; nothing to pre-register

    def collect(self) -> Iterator[Any]:
        snap = self._snapshot()
        queues = sorted(snap.queues)

        depth = GaugeMetricFamily("xjobs_queue_depth", "Jobs ready to run now, per queue.", labels=["queue"])
        oldest = GaugeMetricFamily("xjobs_queue_oldest_ready_seconds",
                                   "Age of the oldest job ready to run now, per queue.", labels=["queue"])
        for q in sorted(set(queues) | set(snap.depth) | set(snap.oldest_ready_seconds)):
            depth.add_metric([q], snap.depth.get(q, 0))
            oldest.add_metric([q], snap.oldest_ready_seconds.get(q, 0.0))
        yield depth
        yield oldest

        per_state = GaugeMetricFamily(
            "xjobs_queue_jobs", "Jobs per queue in the live states and dead; the finished bulk is "
            "counted by xjobsd jobs stats, not every scrape.", labels=["queue", "state"])
        for q in sorted(set(queues) | set(snap.states)):
            counts = snap.states.get(q, {})
            for state in COUNTED_STATES:   # completed and cancelled are never counted: no 0 stands in
                per_state.add_metric([q, state], counts.get(state, 0))
        yield per_state

        waiting = GaugeMetricFamily(
            "xjobs_queue_waiting_jobs", "Live jobs that wait, per queue and reason: key (a keyed member for "
            "its key), sequence (an ordered member for its turn), rate (due later: its rate key's "
            "window is full), snoozed (due later: it snoozed), scheduled (due later otherwise: delay, "
            "run_at, a retry's backoff, a debounce).",
            labels=["queue", "reason"])
        for q in sorted(set(queues) | set(snap.waiting)):
            reasons = snap.waiting.get(q, {})
            for reason in WAITING_REASONS:   # every reason, 0 when none waits: an alert needs no absent()
                waiting.add_metric([q, reason], reasons.get(reason, 0))
        yield waiting

        # job_name, not job: Prometheus owns job (the scrape target) and would rename ours exported_job
        jobs = CounterMetricFamily("xjobs_jobs", "Job runs settled, per queue, job and outcome.",
                                   labels=["queue", "job_name", "outcome"])
        for (q, job, outcome), n in sorted(snap.jobs.items()):
            jobs.add_metric([q, job, outcome], n)
        yield jobs

        histogram = HistogramMetricFamily("xjobs_job_duration_seconds", "Job run durations.",
                                          labels=["queue", "job_name"])
        for (q, job), hist in sorted(snap.durations.items(), key=lambda item: item[0]):
            pairs = [(_bound(b), hist.buckets[i] if i < len(hist.buckets) else 0)
                     for i, b in enumerate(DURATION_BUCKETS)]
            pairs.append(("+Inf", hist.count))
            histogram.add_metric([q, job], pairs, hist.sum)
        yield histogram

        steps = CounterMetricFamily(
            "xjobs_steps", "Durable steps, per queue and kind: run (a step.run body called), replayed "
            "(answered from its record), woke (a sleeper woke and went on), delivered (a waiting "
            "job got its event), timed_out (a wait's timeout passed first).", labels=["queue", "kind"])
        for q in queues:
            for kind in STEP_COUNTS:
                steps.add_metric([q, kind], snap.steps.get((q, kind), 0))
        yield steps

        yield _per_queue(CounterMetricFamily, "xjobs_claim_failures", "Claim rounds that failed (the "
                         "database refused or was away), per queue: the worker tries again at its poll.",
                         queues, snap.claim_failed)
        yield _per_queue(CounterMetricFamily, "xjobs_lease_lost", "Leases a worker lost, per queue.",
                         queues, snap.lease_lost)
        yield _per_queue(CounterMetricFamily, "xjobs_jobs_released", "Running jobs of a dead worker "
                         "child handed back at once, per queue.", queues, snap.released)
        yield _per_queue(GaugeMetricFamily, "xjobs_in_flight", "Jobs running now, per queue.",
                         queues, snap.in_flight)
        yield _per_queue(GaugeMetricFamily, "xjobs_queue_paused", "1 while the queue is paused "
                         "fleet-wide (xjobsd queues pause), as of the last statistics round.",
                         queues, {q: 1 for q in snap.paused})
        if snap.outbox is not None:   # read from the database, true whether or not a relay runs here
            pending, oldest_seconds = snap.outbox
            yield GaugeMetricFamily("xjobs_outbox_pending", "Outbox rows staged and not yet "
                                    "published, fleet-wide.", value=pending)
            yield GaugeMetricFamily("xjobs_outbox_oldest_seconds", "Age of the oldest outbox row "
                                    "not yet published.", value=oldest_seconds)
        yield _per_queue(GaugeMetricFamily, "xjobs_queue_quarantined", "Ready jobs that were "
                         "running when a worker process crashed, waiting to run alone.",
                         queues, {q: c.get("quarantined", 0) for q, c in snap.states.items()})

        yield _per_queue(GaugeMetricFamily, "xjobs_queue_unknown_jobs", "Ready jobs of a name no "
                         "worker of this daemon's code has a body for: no claim takes them (a "
                         "rolling deploy, or a job removed from the code).", queues, snap.unknown)

        restarts = CounterMetricFamily("xjobs_child_restarts", "Child processes started again after "
                                       "an unexpected exit, per role.", labels=["role"])
        for role, n in sorted(snap.restarts.items()):
            restarts.add_metric([role], n)
        yield restarts

        crash = GaugeMetricFamily("xjobs_child_crash_loop", "1 while a child slot is in a crash loop.",
                                  labels=["role", "queue"])
        for (role, q), flag in sorted(snap.crash_loop.items()):
            crash.add_metric([role, q], flag)
        yield crash

        children = GaugeMetricFamily("xjobs_children", "Child processes per role and state.",
                                     labels=["role", "state"])
        for (role, state), n in sorted(snap.children.items()):
            children.add_metric([role, state], n)
        yield children

        for name, (help_text, value) in sorted(snap.role_gauges.items()):
            yield GaugeMetricFamily(name, help_text, value=value)
        yield GaugeMetricFamily("xjobs_database_up", "1 while the supervisor's last statistics "
                                "round reached the database.", value=1 if snap.database_up else 0)


def _per_queue(family: type, name: str, help_text: str, queues: Sequence[str],
               counts: Mapping[str, float]) -> Any:
    """One sample per queue, every configured queue present (0 until it has a value)."""
    metric = family(name, help_text, labels=["queue"])
    for q in sorted(set(queues) | set(counts)):
        metric.add_metric([q], counts.get(q, 0))
    return metric


def _bound(value: float) -> str:
    return repr(float(value))


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "MetricsServer"
    protocol_version = "HTTP/1.0"   # one request per connection: the deadline is the request's

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        owner = self.server.owner
        if path == "/metrics":
            self._reply(200, generate_latest(owner.registry), CONTENT_TYPE_LATEST)
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
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(self.snapshot))
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
