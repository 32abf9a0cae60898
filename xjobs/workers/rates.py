"""What a worker adds to the fleet's per-minute outcome counts (``job_rates``).

The dashboard draws throughput and failure rate from these rows, so it never counts finished
jobs (millions of them, and deleted by retention anyway). A worker reports the runs that
ended since its last report, per queue and outcome, in ONE statement every
``REPORT_EVERY_MS`` and once more when it closes: a cost per report, never per job. A report
that fails is not lost; its counts go with the next one. A process killed between reports
loses its last few seconds of counts, which only the chart misses.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..drivers.base import QueueStore
from .stats import WorkerStats

log = logging.getLogger("xjobs.worker")

REPORT_EVERY_MS = 10_000.0
# what the chart shows: throughput is every run that ended, the failure rate those that failed
RATED = ("completed", "retried", "dead", "cancelled", "interrupted")


class RateReporter:
    def __init__(self, *, driver: QueueStore, stats: WorkerStats, queue_of: Callable[[str], str],
                 every_ms: float = REPORT_EVERY_MS) -> None:
        self.driver = driver
        self.stats = stats
        self.queue_of = queue_of
        self.every_ms = every_ms
        self._reported: dict[str, dict[str, int]] = {}   # job name -> outcome -> counted so far
        self._next = 0.0

    def report(self, now_ms: float) -> None:
        if now_ms >= self._next:
            self._next = now_ms + self.every_ms
            self.flush()

    def flush(self) -> None:
        counted = self.stats.job_outcomes()
        delta: dict[str, dict[str, int]] = {}
        for job, outcomes in counted.items():
            before = self._reported.get(job, {})
            for outcome in RATED:
                n = outcomes.get(outcome, 0) - before.get(outcome, 0)
                if n > 0:
                    per = delta.setdefault(self.queue_of(job), {})
                    per[outcome] = per.get(outcome, 0) + n
        if not delta:
            return
        try:
            self.driver.rate_add(delta)
        except Exception as exc:   # the database is away: these counts go with the next report
            log.debug("reporting run outcomes failed (kept for the next report): %s", exc)
            return
        self._reported = counted
