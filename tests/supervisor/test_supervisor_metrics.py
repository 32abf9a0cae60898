"""/metrics from a snapshot, parsed by prometheus-client; /healthz and /readyz answers."""

from __future__ import annotations

import time
from dataclasses import replace
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from xjobs.errors import InvalidOption
from xjobs.options import parse_address
from xjobs.supervisor.metrics import MetricsEndpoint, MetricsSnapshot
from xjobs.workers.telemetry import DURATION_BUCKETS, Histogram

SNAPSHOT = MetricsSnapshot(
    alive_at=0.0, not_ready=None, queues=["emails"],
    depth={"emails": 7}, oldest_ready_seconds={"emails": 12.5},
    states={"emails": {"ready": 7, "running": 2, "completed": 100, "quarantined": 3}}, paused=["reports"],
    jobs={("emails", "send", "completed"): 100, ("emails", "send", "retried"): 3},
    durations={("emails", "send"): Histogram([10] * len(DURATION_BUCKETS), 4.5, 103)},
    lease_lost={"emails": 1}, released={"emails": 2}, in_flight={"emails": 2},
    restarts={"worker": 4}, crash_loop={("worker", "emails"): 0},
    children={("worker", "ready"): 2}, role_gauges={}, database_up=True,
    waiting={"emails": {"key": 4, "snoozed": 1}},
)


# every family this snapshot makes the endpoint serve, as the parser names them (counters lose
# _total). The scheduler's and the relay's gauges come from their roles and the database
# summary, which this snapshot leaves out; the daemon tests read them from a real /metrics.
SERVED = {"xjobs_queue_depth", "xjobs_queue_oldest_ready_seconds", "xjobs_queue_jobs", "xjobs_jobs",
          "xjobs_job_duration_seconds", "xjobs_lease_lost", "xjobs_jobs_released", "xjobs_in_flight",
          "xjobs_queue_paused", "xjobs_queue_quarantined", "xjobs_child_restarts", "xjobs_child_crash_loop", "xjobs_children", "xjobs_steps", "xjobs_queue_unknown_jobs", "xjobs_claim_failures",
          "xjobs_database_up", "xjobs_queue_waiting_jobs"}


@pytest.fixture
def endpoint():
    ep = MetricsEndpoint("127.0.0.1:0")
    ep.start()
    yield ep
    ep.stop()


def get(ep: MetricsEndpoint, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{ep.address}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_metrics_render_every_family_from_the_snapshot(endpoint):
    endpoint.publish(replace(SNAPSHOT, alive_at=time.monotonic()))
    status, text = get(endpoint, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("xjobs_queue_depth", (("queue", "emails"),))] == 7
    assert samples[("xjobs_queue_oldest_ready_seconds", (("queue", "emails"),))] == 12.5
    assert samples[("xjobs_queue_jobs", (("queue", "emails"), ("state", "running")))] == 2
    assert samples[("xjobs_queue_jobs", (("queue", "emails"), ("state", "dead")))] == 0
    # the statistics round never counts the finished bulk: no constant 0 for completed jobs
    assert {dict(labels)["state"] for (name, labels) in samples if name == "xjobs_queue_jobs"} == {
        "ready", "running", "suspended", "dead"}
    assert samples[("xjobs_jobs_total", (("job_name", "send"), ("outcome", "completed"), ("queue", "emails")))] == 100
    assert samples[("xjobs_job_duration_seconds_count", (("job_name", "send"), ("queue", "emails")))] == 103
    assert samples[("xjobs_job_duration_seconds_bucket", (("job_name", "send"), ("le", "+Inf"), ("queue", "emails")))] == 103
    assert samples[("xjobs_lease_lost_total", (("queue", "emails"),))] == 1
    assert samples[("xjobs_child_restarts_total", (("role", "worker"),))] == 4
    assert samples[("xjobs_in_flight", (("queue", "emails"),))] == 2
    # fleet-wide: a paused queue this daemon does not serve shows too
    assert samples[("xjobs_queue_paused", (("queue", "emails"),))] == 0
    assert samples[("xjobs_queue_quarantined", (("queue", "emails"),))] == 3
    assert samples[("xjobs_queue_paused", (("queue", "reports"),))] == 1
    # every reason of every queue, 0 when none waits for it
    assert {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == "xjobs_queue_waiting_jobs"} == {
        "key": 4, "sequence": 0, "rate": 0, "snoozed": 1, "scheduled": 0}
    assert all("job" not in dict(labels) for (_, labels) in samples), "job is the scrape target's label"
    assert set(families) == SERVED


def test_a_role_gauge_in_the_snapshot_is_served(endpoint):
    endpoint.publish(replace(SNAPSHOT, role_gauges={"xjobs_scheduler_leader": ("1 while it leads.", 1.0)}))
    families = {f.name: f for f in text_string_to_metric_families(get(endpoint, "/metrics")[1])}
    assert families["xjobs_scheduler_leader"].samples[0].value == 1.0
    assert set(families) == SERVED | {"xjobs_scheduler_leader"}


def test_health_and_readiness(endpoint):
    endpoint.publish(replace(SNAPSHOT, alive_at=time.monotonic()))
    assert get(endpoint, "/healthz") == (200, "ok\n")
    assert get(endpoint, "/readyz") == (200, "ready\n")
    endpoint.publish(replace(SNAPSHOT, alive_at=time.monotonic(), not_ready="draining"))
    assert get(endpoint, "/readyz") == (503, "not ready: draining\n")
    endpoint.publish(replace(SNAPSHOT, alive_at=time.monotonic() - 60))
    assert get(endpoint, "/healthz")[0] == 503
    assert get(endpoint, "/nope")[0] == 404


def test_a_port_in_use_and_bad_addresses_name_the_option(endpoint):
    with pytest.raises(InvalidOption) as exc:
        MetricsEndpoint(endpoint.address)
    assert exc.value.option == "metrics"
    for bad in ("9464", "host:", "127.0.0.1:99999", "127.0.0.1:-1"):
        with pytest.raises(InvalidOption):
            parse_address(bad)
