"""The text ``/metrics`` serves: the arbiter's latest snapshot as Prometheus metric families,
built with prometheus-client at scrape time.

``metrics.py`` imports this module at the first scrape, never before the children are forked:
a child never serves ``/metrics``, and what the supervisor has imported when it forks is in
every child's memory.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

from prometheus_client.core import (CollectorRegistry, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ..drivers.base import COUNTED_STATES
from ..drivers.records import WAITING_REASONS
from ..workers.telemetry import DURATION_BUCKETS, STEP_COUNTS
from .metrics import MetricsSnapshot


def renderer(snapshot: Callable[[], MetricsSnapshot]) -> Callable[[], tuple[bytes, str]]:
    """What a scrape calls: the text of ``snapshot()`` as it is then, and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return lambda: (generate_latest(registry), CONTENT_TYPE_LATEST)


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
