"""The operator artifacts in the repository (the Prometheus alert rules and the Grafana
dashboard of docs/production/), read for their tests: every PromQL expression they hold, and
the names those expressions read (tests/promql_names.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import yaml

from tests.promql_names import Names, PromQLError, names

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "production" / "alerts.yml"
DASHBOARD = ROOT / "docs" / "production" / "grafana-dashboard.json"
RULE_TESTS = ROOT / "tests" / "unit" / "prometheus_alerts_test.yml"

# series Prometheus writes itself for every scrape target: no daemon exports them
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
# labels a scrape adds to every series (the target's), beside the ones the daemon exports
TARGET_LABELS = frozenset({"instance", "job"})

_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[A-Za-z_]\w*)\s*\)\s*$")


def rules() -> list[dict[str, Any]]:
    """Every rule of every group of the alert rules file."""
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def rule_expressions() -> dict[str, str]:
    """alert (or recorded series) name -> its expression."""
    return {rule.get("alert") or rule["record"]: rule["expr"] for rule in rules()}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside a collapsed row too (Grafana nests them there)."""
    for panel in board.get("panels", ()):
        yield panel
        yield from panel.get("panels", ())


def variable_query(variable: dict[str, Any]) -> str:
    """A query variable's query, in either of the shapes Grafana saves it in."""
    query = variable.get("query", "")
    return str(query.get("query", "") if isinstance(query, dict) else query)


def dashboard_expressions(board: dict[str, Any]) -> dict[str, str]:
    """"panel title / refId" -> the PromQL of every panel target."""
    return {f"{panel.get('title')} / {target.get('refId')}": target["expr"]
            for panel in panels(board) for target in panel.get("targets", ()) if "expr" in target}


def dashboard_names(board: dict[str, Any]) -> Names:
    """What the dashboard reads: its panels' expressions and its variables' label_values()."""
    found = Names()
    for expr in dashboard_expressions(board).values():
        found.add(names(expr))
    for variable in board.get("templating", {}).get("list", ()):
        if variable.get("type") != "query":
            continue
        query = variable_query(variable)
        match = _LABEL_VALUES.match(query)
        if match is None:
            raise PromQLError(f"variable {variable.get('name')!r}: not a label_values() query: {query!r}")
        if match["selector"]:   # label_values(metric, label): the label is one of metric's
            read = names(match["selector"])
            for metric in read.metrics:
                read.matched.setdefault(metric, set()).add(match["label"])
            found.add(read)
    return found


def rule_names() -> Names:
    found = Names()
    for expr in rule_expressions().values():
        found.add(names(expr))
    return found
