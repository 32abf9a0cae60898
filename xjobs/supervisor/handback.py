"""What a dead child's hand-back did, counted and told: the probe hands back the running jobs
of a child whose sessions are gone (``probe.py``), and the arbiter passes each answer here.

Every handed-back job counts toward its queue's ``released``; one dead-lettered by the
hand-back counts as a dead settlement, and a crash's verdict (charged alone, or dead on its
last attempt) is logged per job, since that is the line an operator looks for after an OOM.
"""

from __future__ import annotations

import logging
from typing import Sequence

from ..drivers.base import Released
from .tally import QueueCount, Settled, Tally

log = logging.getLogger("xjobs.supervisor")


def count_handback(tally: Tally, identity: str, queue: str | None, released: Sequence[Released]) -> None:
    tally.add(QueueCount(queue or "", "released"), len(released))
    outcomes: dict[str, int] = {}
    for job in released:
        outcomes[job.outcome] = outcomes.get(job.outcome, 0) + 1
        if job.outcome == "dead":
            tally.add(Settled(job.queue, job.name, "dead"))
        if job.outcome in ("dead", "crashed"):
            log.warning("job %s#%s crashed its worker process %s alone%s", job.name, job.id,
                        identity, "; dead-lettered on its last attempt" if job.outcome == "dead"
                        else "; attempt counted")
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    log.info("handed back %d running job(s) of %s (queue %s): %s", len(released), identity, queue, summary)
