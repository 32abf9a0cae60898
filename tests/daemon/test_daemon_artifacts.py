"""The Grafana dashboard and the Prometheus alert rules of docs/production/ read only what a
running ``xjobsd`` serves on /metrics: every metric name in their expressions (a histogram's
``_bucket``, ``_sum`` and ``_count`` as the samples they are), every label their selectors match
on the metric they select, and every label they group by on some metric."""

from __future__ import annotations

import signal

import pytest

from tests.daemon_fixtures import Daemon, wait_for
from tests.operator_artifacts import PROMETHEUS_OWN, TARGET_LABELS, dashboard, dashboard_names, rule_names

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def exported(daemon: Daemon) -> dict[str, set[str]]:
    """sample name -> the label names its samples carry, as /metrics serves them now."""
    samples: dict[str, set[str]] = {}
    for family in daemon.metrics().values():
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def test_every_name_the_dashboard_and_the_alert_rules_read_is_exported(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2")
    daemon.ready()
    # the job counters and the duration histogram have samples once runs settle
    env.enqueue("touch_alpha", "alpha", [{"n": n} for n in range(3)], key=lambda i: f"a:{i['n']}")
    read = dashboard_names(dashboard())
    read.add(rule_names())
    wanted = read.metrics - PROMETHEUS_OWN
    assert len(wanted) >= 15   # the reader found the expressions' names, not nothing

    def complete() -> dict[str, set[str]] | None:
        have = exported(daemon)
        return have if wanted <= have.keys() else None
    try:
        # the leader's gauge comes with the scheduler's first round, the queue figures with
        # the first statistics round
        have = wait_for(complete, 20, "/metrics to serve every name the artifacts read")
    except AssertionError:
        assert sorted(wanted - exported(daemon).keys()) == [], "read by the artifacts, not exported"
        raise

    unmatched = {metric: sorted(labels - have[metric] - TARGET_LABELS)
                 for metric, labels in read.matched.items() if metric in wanted}
    assert {metric: labels for metric, labels in unmatched.items() if labels} == {}
    every_label = set().union(*have.values()) | TARGET_LABELS
    assert sorted(read.grouped - every_label) == []

    daemon.signal(signal.SIGTERM)
    assert daemon.wait(15) == 0
