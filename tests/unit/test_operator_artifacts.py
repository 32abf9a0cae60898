"""The operator artifacts hold together without a daemon: the Grafana dashboard is dashboard
JSON an import takes (its variables, every panel titled and queried, on the chosen data source),
it shows what an operator asks of xjobs, every name it and the alert rules read is a metric the
docs list, and every alert has promtool tests both firing and quiet. That each name is exported
for real is tests/daemon/test_daemon_artifacts.py; that the rules pass promtool is
tests/unit/test_docs_site.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.operator_artifacts import (PROMETHEUS_OWN, RULE_TESTS, dashboard, dashboard_expressions,
                                      dashboard_names, panels, rule_expressions, rule_names, variable_query)
from tests.promql_names import PromQLError, names
from xjobs.workers.telemetry import OUTCOMES, STEP_COUNTS

ROOT = Path(__file__).resolve().parents[2]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def test_the_dashboard_is_grafana_json_with_a_datasource_and_a_queue_variable():
    board = dashboard()
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 39   # Grafana 10.4 on
    assert board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    queue = variables["queue"]
    assert queue["type"] == "query" and queue["datasource"] == DATASOURCE
    assert re.fullmatch(r"label_values\(xjobs_\w+, queue\)", variable_query(queue))
    assert queue["includeAll"] and queue["multi"] and queue["allValue"] == ".*"


def test_every_panel_has_a_title_and_a_query_on_the_chosen_datasource():
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    shown = [panel for panel in panels(board) if panel["type"] != "row"]
    assert len(shown) >= 10
    for panel in shown:
        where = panel.get("title") or panel["id"]
        assert panel.get("title", "").strip(), f"panel {where} has no title"
        assert panel["datasource"] == DATASOURCE, where
        targets = panel.get("targets", [])
        assert targets, f"panel {where} has no query"
        assert len({t["refId"] for t in targets}) == len(targets), where
        for target in targets:
            assert target.get("expr", "").strip() and target["datasource"] == DATASOURCE, where
        grid = panel["gridPos"]
        assert 1 <= grid["w"] and grid["x"] + grid["w"] <= 24 and grid["h"] >= 1, where


def test_the_dashboard_shows_what_an_operator_asks():
    read = dashboard_names(dashboard()).metrics
    asked = {"xjobs_queue_depth", "xjobs_queue_oldest_ready_seconds",    # depth and age per queue
             "xjobs_jobs_total",                                          # throughput by outcome
             "xjobs_job_duration_seconds_bucket",                         # duration quantiles
             "xjobs_lease_lost_total", "xjobs_child_restarts_total", "xjobs_child_crash_loop",
             "xjobs_outbox_pending", "xjobs_scheduler_leader"}
    assert asked - read == set()
    expressions = dashboard_expressions(dashboard()).values()
    assert any("histogram_quantile(" in e and "xjobs_job_duration_seconds_bucket" in e for e in expressions)
    assert any("by (outcome)" in e and "xjobs_jobs_total" in e for e in expressions)


def test_a_panel_split_by_queue_follows_the_queue_variable():
    unfiltered = [where for where, expr in dashboard_expressions(dashboard()).items()
                  if "queue" in names(expr).grouped and "$queue" not in expr]
    assert unfiltered == []


def test_every_name_read_is_a_metric_the_docs_list():
    listed = set(re.findall(r"`(xjobs_[a-z_]+)", (ROOT / "docs" / "guides" / "metrics.md").read_text()))
    read = (dashboard_names(dashboard()).metrics | rule_names().metrics) - PROMETHEUS_OWN
    unlisted = {name for name in read
                if name not in listed and not any(name.endswith(s) and name[:-len(s)] in listed
                                                  for s in HISTOGRAM_SUFFIXES)}
    assert unlisted == set()


def test_every_label_value_a_matcher_names_is_one_the_daemon_gives():
    # the scrape job's name is the one the docs tell operators to give it
    known = {"outcome": set(OUTCOMES), "kind": set(STEP_COUNTS), "job": {"xjobsd"}}
    named = dashboard_names(dashboard())
    named.add(rule_names())
    assert set(named.values) <= set(known), "a matcher on a label this test knows no values of"
    assert {label: sorted(values - known[label]) for label, values in named.values.items()
            if values - known[label]} == {}


def test_every_alert_has_promtool_tests_that_fire_and_that_stay_quiet():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for group in tests:
        for case in group.get("alert_rule_test", ()):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    alerts = set(rule_expressions())
    assert alerts - fired == set(), "alerts no test sees firing"
    assert alerts - quiet == set(), "alerts no test sees staying quiet"
    # a quiet case on a misspelt series would pass for nothing: each series is one the rules read
    series = {s["series"].split("{", 1)[0] for group in tests for s in group["input_series"]}
    assert series - rule_names().metrics == set()


def test_the_reader_tells_metrics_from_functions_labels_and_variables():
    read = names('histogram_quantile(0.99, sum by (queue, le) (rate(xjobs_job_duration_seconds_bucket'
                 '{queue=~"$queue"}[$__rate_interval])))')
    assert read.metrics == {"xjobs_job_duration_seconds_bucket"}
    assert read.matched == {"xjobs_job_duration_seconds_bucket": {"queue"}} and read.grouped == {"queue", "le"}

    read = names('sum(a_total{x="by (y)"}) by (q) / on (q) group_left (r) max(b offset 15m) > bool 0.5 '
                 'unless {__name__="c", k!~"v|w", j=~"v.*", queue=~"$queue|"} or on() vector(0) and Inf > NaN')
    assert read.metrics == {"a_total", "b", "c"}
    assert read.matched == {"a_total": {"x"}, "b": set(), "c": {"k", "j", "queue"}} and read.grouped == {"q", "r"}
    assert read.values == {"x": {"by (y)"}, "k": {"v", "w"}}   # a real regex or a variable names no value

    # a word before "(" that is no function is a typo, not a metric; a broken selector is refused
    for broken in ("rat(xjobs_jobs_total[5m])", "xjobs_jobs_total{queue=}", "sum by (queue (x)",
                   'x{a="b"', "{a=\"b\"}", "x # y"):
        with pytest.raises(PromQLError):
            names(broken)
