"""The runs a queue worker holds, and how many bodies each of its queues has running.

A run is HELD from its claim until it is settled; its queue's slot is BUSY from its claim
until its body ends. The two are counted apart because they end apart: a run settled by a
timeout or a lost lease is let go at once, while its body may run on in a thread that
cannot be stopped, and that body keeps its slot until it returns::

    claimed ──hold()──> held + busy ──finish()──> busy only (body runs on) ──vacate()──> gone
                            │                                                     ^
                            └──vacate() (body ended)──> held only ──finish()──────┘

``in_flight()`` counts busy slots, so a worker never runs more bodies than its concurrency,
and a drain waits for every body, settled or not.

The table belongs to the worker's loop thread. The lease watch thread only reads snapshots
of ``renewable()`` (and retries one taken while the loop changed the table).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..context import SETTLED
from .execute import Run


def _nothing(run: Run) -> None:
    pass


class RunTable:
    def __init__(self, slots: Mapping[str, int], *, finished: Callable[[Run], None] = _nothing,
                 vacated: Callable[[Run], None] = _nothing) -> None:
        """``finished``: what the owner counts once a run settles, whoever settled it;
        ``vacated``: what else a body's end frees (its admission)."""
        self.slots = dict(slots)                    # queue -> bodies it may run at once
        self.held: dict[int, Run] = {}              # job id -> its run, until settled
        self.busy = {q: 0 for q in self.slots}      # queue -> bodies running, settled or not
        self._finished = finished
        self._vacated = vacated
        # settled runs whose settlement write failed and waits for its retry (settle_retry.py):
        # their leases are still renewed, so a failed write alone never lets one lapse
        self._settling: dict[int, Run] = {}

    def get(self, job_id: int) -> Run | None:
        return self.held.get(job_id)

    def hold(self, run: Run) -> None:
        """A claimed job's run: held until settled, its slot busy until its body ends."""
        self.held[run.job.id] = run
        self.busy[run.job.queue] += 1

    def finish(self, run: Run) -> None:
        """The run is settled: nothing more is written or renewed for it, and its signal is
        set, so a step or a transaction a leftover thread of its body attempts is refused."""
        first = not run.settled
        run.settled = True
        run.signal.abort(SETTLED, "the run is settled; it writes nothing more")
        if self.held.get(run.job.id) is run:  # a newer claim of the same job may hold the key
            del self.held[run.job.id]
        if first:
            self._finished(run)

    def vacate(self, run: Run) -> None:
        """The run's body ended, or will never start: its slot is free again (and whatever the
        worker's admission counted for it: its limiter count, its fleet-wide slot)."""
        self.busy[run.job.queue] -= 1
        self._vacated(run)

    def free(self, queue: str) -> int:
        return self.slots[queue] - self.busy[queue]

    def in_flight(self) -> int:
        return sum(self.busy.values())

    def live(self) -> list[Run]:
        """Held runs not yet settled."""
        return [r for r in self.held.values() if not r.settled]

    def renewable(self) -> list[Run]:
        # a run whose transaction completed the job, or whose step suspended it, holds nothing
        # left to renew (a renewal would only find the job gone and call it a lost lease)
        return [r for r in self.held.values() if not r.settled and not r.ctx.completed_in_transaction
                and not r.ctx.fence.suspending]

    def settling(self) -> list[Run]:
        """Runs whose settlement is still to land: renewed, never judged lost by a window."""
        return list(self._settling.values())

    def hold_settling(self, runs: list[Run]) -> None:
        for run in runs:
            self._settling[id(run)] = run

    def forget_settling(self, runs: list[Run]) -> None:
        for run in runs:
            self._settling.pop(id(run), None)

    def reported(self, now_ms: float, alone: Callable[[Run], bool], most: int) -> list[dict[str, Any]]:
        """Runs worth naming in ``xjobsd status``: those that report progress, and a suspect
        running ``alone`` (at most ``most``: the heartbeat stays small)."""
        out = []
        for run in list(self.held.values()):
            report = run.ctx.last_progress
            apart = alone(run)
            if report is None and not apart:
                continue
            out.append({"id": run.job.id, "name": run.job.name, "attempt": run.job.attempt,
                        "seconds": round(max(0.0, now_ms - run.started_ms) / 1000.0, 3),
                        "alone": apart,
                        "progress": report.as_json() if report is not None else None})
            if len(out) >= most:
                break
        return out

    def running_given_up(self) -> bool:
        """Whether a body this worker gave up on (timed out, lease lost) still runs."""
        return self.in_flight() > len(self.live())


__all__ = ["RunTable"]
