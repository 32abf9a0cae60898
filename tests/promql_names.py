"""The metric and label names a PromQL expression reads, for checking operator artifacts against
what ``xjobsd`` exports. A tokenizer, not a parser: it needs only to tell a metric name from a
function, an aggregation, a keyword, a label, a duration or a Grafana variable, and it refuses
what it does not know (an unknown function is a typo, not a metric) instead of guessing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# every PromQL function and aggregation an artifact may call; a name followed by "(" that is not
# here is refused, so "rat(xjobs_jobs_total[5m])" fails rather than passing as a metric called rat
FUNCTIONS = frozenset("""
    sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk
    abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week
    day_of_year days_in_month delta deriv exp floor histogram_count histogram_fraction
    histogram_quantile histogram_sum holt_winters hour idelta increase irate label_join
    label_replace ln log2 log10 minute month predict_linear rate resets round scalar sgn sort
    sort_desc sqrt time timestamp vector year avg_over_time min_over_time max_over_time
    sum_over_time count_over_time quantile_over_time stddev_over_time stdvar_over_time
    last_over_time present_over_time start end
""".split())
# keywords whose parenthesised list holds label names, not expressions
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = GROUPING | {"and", "or", "unless", "offset", "bool", "atan2"}
NUMBER_WORDS = frozenset({"inf", "nan"})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+)              # Grafana's $queue, ${datasource}, $__rate_interval
  | (?P<range>\[[^\]]*\])                        # [5m], [$__rate_interval], a subquery's [1h:5m]
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+)(?![\w.])   # after offset or @
  | (?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<punct>=~|!~|==|!=|<=|>=|[-+*/%^<>=@{}(),])
""", re.VERBOSE)


_ALTERNATION = re.compile(r"[\w-]+(?:\|[\w-]+)*")   # a regex that only lists values: a|b|c


class PromQLError(ValueError):
    """An expression this reader does not understand: it says where, rather than guessing."""


@dataclass
class Names:
    """What one or more expressions read: the metrics, the labels each metric's selectors
    match on, the labels of every by/without/on/ignoring/group_* list, and the label values
    matchers name (``="v"``, ``!="v"``, and a regex that is a plain ``a|b`` alternation)."""
    metrics: set[str] = field(default_factory=set)
    matched: dict[str, set[str]] = field(default_factory=dict)   # metric -> labels in its {...}
    grouped: set[str] = field(default_factory=set)
    values: dict[str, set[str]] = field(default_factory=dict)    # label -> values named

    def add(self, other: "Names") -> None:
        self.metrics |= other.metrics
        self.grouped |= other.grouped
        for metric, labels in other.matched.items():
            self.matched.setdefault(metric, set()).update(labels)
        for label, named in other.values.items():
            self.values.setdefault(label, set()).update(named)


def tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) of every token but whitespace; an unknown character is refused."""
    out: list[tuple[str, str]] = []
    at = 0
    while at < len(expr):
        match = _TOKEN.match(expr, at)
        if match is None:
            raise PromQLError(f"cannot read {expr[at:at + 20]!r} at {at} in {expr!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            out.append((kind, match.group()))
        at = match.end()
    return out


def names(expr: str) -> Names:
    """The metric and label names ``expr`` reads."""
    toks = tokens(expr)
    found = Names()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "name" and text.lower() in GROUPING and following == "(":
            i, labels = _label_list(toks, i + 2, expr)
            found.grouped.update(labels)
            continue
        if kind == "name" and (text.lower() in KEYWORDS or text.lower() in NUMBER_WORDS):
            i += 1
            continue
        if kind == "name" and text in FUNCTIONS and following.lower() in ("by", "without"):
            i += 1   # an aggregation with its grouping first: sum by (queue) (...)
            continue
        if kind == "name" and following == "(":
            if text not in FUNCTIONS:
                raise PromQLError(f"{text!r} is no PromQL function, in {expr!r}")
            i += 1
            continue
        if kind == "name":
            found.metrics.add(text)
            found.matched.setdefault(text, set())
            if following == "{":
                i, labels, _ = _matchers(toks, i + 2, expr, found.values)
                found.matched[text].update(labels)
                continue
        elif text == "{":   # a selector of matchers alone: its metric is the __name__ it matches
            i, labels, metric = _matchers(toks, i + 1, expr, found.values)
            if metric is None:
                raise PromQLError(f"a selector without a metric name (no __name__=...) in {expr!r}")
            found.metrics.add(metric)
            found.matched.setdefault(metric, set()).update(labels - {"__name__"})
            continue
        i += 1
    return found


def _label_list(toks: list[tuple[str, str]], i: int, expr: str) -> tuple[int, set[str]]:
    """The label names of a ``(a, b)`` list starting after its "("; the index after its ")"."""
    labels: set[str] = set()
    while i < len(toks) and toks[i][1] != ")":
        kind, text = toks[i]
        if kind == "name":
            labels.add(text)
        elif text != ",":
            raise PromQLError(f"{text!r} in a label list, in {expr!r}")
        i += 1
    if i >= len(toks):
        raise PromQLError(f"a label list is not closed, in {expr!r}")
    return i + 1, labels


def _matchers(toks: list[tuple[str, str]], i: int, expr: str,
              values: dict[str, set[str]]) -> tuple[int, set[str], str | None]:
    """The labels of a ``{a="x", b=~"y"}`` selector starting after its "{", the metric named by
    a ``__name__="..."`` matcher if any, and the index after its "}"; the values it names go to
    ``values``."""
    labels: set[str] = set()
    metric: str | None = None
    while i < len(toks) and toks[i][1] != "}":
        if toks[i][1] == ",":
            i += 1
            continue
        if i + 2 >= len(toks) or toks[i][0] != "name" or toks[i + 1][1] not in ("=", "!=", "=~", "!~") \
                or toks[i + 2][0] != "string":
            raise PromQLError(f"a label matcher cannot be read at {toks[i][1]!r}, in {expr!r}")
        label, op, value = toks[i][1], toks[i + 1][1], toks[i + 2][1][1:-1]
        if label == "__name__" and op == "=":
            metric = value
        elif "$" not in value and (op in ("=", "!=") or _ALTERNATION.fullmatch(value)):
            values.setdefault(label, set()).update(value.split("|") if op in ("=~", "!~") else [value])
        labels.add(label)
        i += 3
    if i >= len(toks):
        raise PromQLError(f"a selector is not closed, in {expr!r}")
    return i + 1, labels, metric
