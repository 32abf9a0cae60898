"""Running due scans (``xjobs.scans``), once per interval fleet-wide, each isolated.

The scheduler's leader calls ``run_due_scans`` after a round, on a thread of its own (a long
scan must not keep the loop from renewing its lease); a tick calls it inside its cron round.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..context import TIMED_OUT
from ..drivers.base import Dispatch, JobDriver
from ..logs import event
from ..registry import Registry
from ..scans import ScanCtx, ScanHandle
from .failures import describe

log = logging.getLogger("xjobs.scan")


@dataclass(frozen=True)
class ScanRun:
    name: str
    ok: bool
    seconds: float
    error: str | None = None

    @property
    def outcome(self) -> str:
        """As ``xjobs_jobs_total`` counts it: a failed scan runs again at its next interval."""
        return "completed" if self.ok else "retried"


def run_due_scans(driver: JobDriver, registry: Registry, *, election: str, holder: str,
                  deadline: float | None = None, stopping: Callable[[], bool] = lambda: False,
                  started: Callable[[ScanCtx | None], None] = lambda ctx: None) -> list[ScanRun]:
    """Start every scan whose interval has passed, each only if this holder still leads and
    nobody moved its watermark meanwhile (the move is fenced before ``fn`` is called).

    ``deadline`` (epoch s): each scan's ``ctx.signal`` is set when it passes. ``started`` is
    told the ctx of the scan running now (None after), so a drain can set its signal too."""
    scans = registry.scans()
    if not scans:
        return []
    now = driver.clock_now_ms()
    marks = {w.task: w.watermark_ms for w in driver.schedule_state()}
    runs = []
    for handle in scans:
        if stopping():
            break
        last = marks.get(handle.watermark_key)
        if last is not None and now < last + handle.every_ms:
            continue
        moved = driver.schedule_dispatch(Dispatch(election=election, holder=holder,
                                                  task=handle.watermark_key, expected_ms=last,
                                                  watermark_ms=int(now)))
        if moved is None:      # another leader, or another pass, started it
            continue
        runs.append(_run(handle, deadline, started))
    return runs


def _run(handle: ScanHandle, deadline: float | None, started: Callable[[ScanCtx | None], None]) -> ScanRun:
    ctx = ScanCtx(handle.name, deadline)
    timer = None
    if deadline is not None:   # the budget ends: tell the scan, as a drain tells a job
        timer = threading.Timer(max(0.0, deadline - time.time()), ctx.signal.abort,
                                (TIMED_OUT, f"scan {handle.name}: its deadline passed"))
        timer.daemon = True
        timer.start()
    started(ctx)
    began = time.perf_counter()
    try:
        handle.fn(ctx)
    except Exception as exc:   # isolated: reported, counted, run again at its next interval
        event(log, logging.ERROR, "scan.failed", "scan %s failed: %s", handle.name, describe(exc),
              scan=handle.name, error=describe(exc))
        return ScanRun(handle.name, False, time.perf_counter() - began, describe(exc))
    finally:
        started(None)
        if timer is not None:
            timer.cancel()
    return ScanRun(handle.name, True, time.perf_counter() - began)


__all__ = ["ScanRun", "run_due_scans"]
