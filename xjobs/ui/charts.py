"""The overview's chart, drawn on the server as SVG: a bar per minute for the runs that ended
(the failed part in red) and a line for the failure rate. Only geometry is computed here;
the template writes the elements, so every label passes through its escaping."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from .pages import Minute

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 180, 64, 20, 10


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    y_ended: float
    h_ended: float
    y_failed: float
    h_failed: float
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    rate_line: str            # polyline points of the failure rate (0..100% over the plot height)
    top_label: str            # the y axis' largest value, runs per minute
    ticks: list[tuple[float, str]]   # x positions and hh:mm labels
    baseline: float
    left: int


def _nice(n: int) -> int:
    """The next round number at or above ``n`` (1, 2, 5 x 10^k): the y axis' top."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if step * m >= n:
                return step * m
        step *= 10


def throughput_chart(minutes: list[Minute]) -> Chart:
    plot_w, plot_h = WIDTH - LEFT - 4, HEIGHT - BOTTOM - TOP
    top = _nice(max([m.ended for m in minutes] + [1]))
    slot = plot_w / max(len(minutes), 1)
    baseline = TOP + plot_h
    bars, points, ticks = [], [], []
    for i, minute in enumerate(minutes):
        x = LEFT + i * slot
        h_ended = plot_h * minute.ended / top
        h_failed = plot_h * minute.failed / top
        clock = datetime.fromtimestamp(minute.at / 1000.0, tz=timezone.utc).strftime("%H:%M")
        bars.append(Bar(round(x + 1, 1), round(max(slot - 2, 1), 1), round(baseline - h_ended, 1),
                        round(h_ended, 1), round(baseline - h_failed, 1), round(h_failed, 1),
                        f"{clock} UTC: {minute.ended} ended, {minute.failed} failed "
                        f"({minute.failure_rate:.1%})"))
        points.append(f"{x + slot / 2:.1f},{baseline - plot_h * minute.failure_rate:.1f}")
        if i % 10 == 0:
            ticks.append((round(x, 1), clock))
    return Chart(WIDTH, HEIGHT, bars, " ".join(points), f"{top:,}/min", ticks, baseline, LEFT)
