"""The overview's chart as SVG, rendered from minutes and read back as XML: nothing is drawn
for a minute in which nothing ended (no bar of height 0, the failure rate's line broken
there, a lone minute a dot), and a window with nothing says so."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timezone

import pytest

pytest.importorskip("jinja2", reason="the dashboard needs the ui extra")

from jinja2 import Environment, PackageLoader, select_autoescape  # noqa: E402

from xjobs.ui.charts import throughput_chart  # noqa: E402
from xjobs.ui.pages import Minute  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
START = 1_800_000_000_000.0 - 1_800_000_000_000.0 % 60_000.0


def svg(minutes: list[Minute]) -> ET.Element:
    env = Environment(loader=PackageLoader("xjobs.ui", "templates"), autoescape=select_autoescape(default=True))
    text = env.get_template("chart.html").render(chart=throughput_chart(minutes))
    return ET.fromstring(text.replace("<svg ", f'<svg xmlns="{SVG[1:-1]}" ', 1))


def hour(**ran: tuple[int, int]) -> list[Minute]:
    """Sixty minutes, ``m7=(ended, failed)`` for the ones in which runs ended."""
    return [Minute(START + i * 60_000.0, *ran.get(f"m{i}", (0, 0))) for i in range(60)]


def clock(i: int) -> str:
    return datetime.fromtimestamp((START + i * 60_000.0) / 1000.0, tz=timezone.utc).strftime("%H:%M")


def points(line: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.attrib["points"].split())]


def test_an_empty_hour_draws_no_bar_and_no_line_but_says_so():
    chart = throughput_chart(hour())
    drawn = svg(hour())
    assert chart.empty and drawn.findall(f"{SVG}g") == []
    assert drawn.findall(f".//{SVG}rect") == [] and drawn.findall(f"{SVG}polyline") == []
    assert drawn.findall(f"{SVG}circle") == []
    [message] = [t for t in drawn.iter(f"{SVG}text") if t.get("data-testid") == "chart-empty"]
    assert message.text == "No run ended in this hour."
    assert len([t for t in drawn.iter(f"{SVG}text") if t.get("class") == "label"]) == 2 + 6   # axes, ticks


def test_minutes_without_runs_draw_nothing_and_break_the_rate_line():
    minutes = hour(m5=(10, 0), m6=(20, 5), m7=(10, 10), m20=(4, 1), m40=(8, 0), m41=(8, 2))
    drawn = svg(minutes)
    assert [t for t in drawn.iter(f"{SVG}text") if t.get("data-testid") == "chart-empty"] == []
    titles = [g.findtext(f"{SVG}title") for g in drawn.findall(f"{SVG}g")]
    assert [t.split(" UTC")[0] for t in titles if t] == [clock(i) for i in (5, 6, 7, 20, 40, 41)]
    rects = drawn.findall(f".//{SVG}rect")
    assert all(float(r.attrib["height"]) > 0 for r in rects)
    assert [r.get("class") for r in rects].count("ended") == 6
    assert [r.get("class") for r in rects].count("failed") == 4      # not where none failed
    slot = (720 - 64 - 4) / 60
    centre = {round(64 + i * slot + slot / 2, 1): i for i in range(60)}
    lines = [[centre[x] for x, _ in points(line)] for line in drawn.findall(f"{SVG}polyline")]
    assert lines == [[5, 6, 7], [40, 41]]                            # broken between runs of minutes
    [dot] = drawn.findall(f"{SVG}circle")
    assert centre[float(dot.attrib["cx"])] == 20                     # a lone minute: a dot
    baseline, top = 180 - 20, 10
    [[m5, m6, m7], [m40, m41]] = [points(line) for line in drawn.findall(f"{SVG}polyline")]
    assert (m5[1], m6[1], m7[1], m40[1]) == (baseline, baseline - (baseline - top) * 0.25, top, baseline)
    assert m41[1] == round(baseline - (baseline - top) * 0.25, 1)   # 0% where runs ended and none failed


def test_a_failed_part_is_drawn_inside_its_bar():
    [bar] = throughput_chart(hour(m59=(50, 10))).bars
    assert bar.h_ended > bar.h_failed > 0 and bar.y_failed + bar.h_failed == bar.y_ended + bar.h_ended
    assert bar.title.endswith("50 ended, 10 failed (20.0%)")
