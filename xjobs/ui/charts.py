"""The overview's chart, drawn on the server as SVG: a bar per minute for the runs that ended
(the failed part in red) and a line for the failure rate. Only geometry is computed here;
``templates/chart.html`` writes the elements, so every label passes through its escaping.

A minute in which nothing ended draws nothing: no bar of height 0, and the failure rate,
which is not 0% but undefined there, breaks its line (a run of minutes is one polyline, a
lone minute a dot). A window with nothing at all says so instead (``empty``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from ..throughput import Minute

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 720, 180, 64, 20, 10


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    y_ended: float
    h_ended: float
    y_failed: float
    h_failed: float      # 0 when none failed: the template draws no failed part then
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]                   # only the minutes in which runs ended
    rate_lines: list[str]             # polyline points of the failure rate (0..100% over the plot
                                      # height), one per run of consecutive minutes with runs
    rate_dots: list[tuple[float, float]]   # a lone minute with runs, between two without
    top_label: str                    # the y axis' largest value, runs per minute
    ticks: list[tuple[float, str]]    # x positions and hh:mm labels
    baseline: float
    left: int

    @property
    def empty(self) -> bool:
        """Nothing ended in the whole window."""
        return not self.bars

    @property
    def middle(self) -> tuple[float, float]:
        """Where the empty window's message goes."""
        return (self.left + (self.width - self.left) / 2, TOP + (self.baseline - TOP) / 2)


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
    bars: list[Bar] = []
    ticks: list[tuple[float, str]] = []
    runs: list[list[tuple[float, float]]] = [[]]   # the rate's points, split where nothing ran
    for i, minute in enumerate(minutes):
        x = LEFT + i * slot
        clock = datetime.fromtimestamp(minute.at / 1000.0, tz=timezone.utc).strftime("%H:%M")
        if i % 10 == 0:
            ticks.append((round(x, 1), clock))
        if not minute.ended:
            if runs[-1]:
                runs.append([])
            continue
        h_ended = plot_h * minute.ended / top
        h_failed = plot_h * minute.failed / top
        bars.append(Bar(round(x + 1, 1), round(max(slot - 2, 1), 1), round(baseline - h_ended, 1),
                        round(h_ended, 1), round(baseline - h_failed, 1), round(h_failed, 1),
                        f"{clock} UTC: {minute.ended} ended, {minute.failed} failed "
                        f"({minute.failure_rate:.1%})"))
        runs[-1].append((round(x + slot / 2, 1), round(baseline - plot_h * minute.failure_rate, 1)))
    lines = [" ".join(f"{x:.1f},{y:.1f}" for x, y in run) for run in runs if len(run) > 1]
    dots = [run[0] for run in runs if len(run) == 1]
    return Chart(WIDTH, HEIGHT, bars, lines, dots, f"{top:,}/min", ticks, baseline, LEFT)
