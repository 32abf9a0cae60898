"""How a queue worker asks for the jobs of one queue: in arrival order, or shared out by key.

A queue whose jobs declare ``fairness`` (``xjobs/fairness.py``) is claimed with
``job_claim_fair``: the free slots go round the keys with due work, with the weights the jobs
declare. Every other queue is claimed with ``job_claim``, filtered by the caps of its capped
jobs and the worker's tenant room. A fair claim that finds nothing at a poll is followed by a
plain one, so rows of a fair queue that carry no key (enqueued before fairness was declared,
or by older code during a deploy) still run once the keyed work leaves the worker idle.
"""

from __future__ import annotations

from typing import Collection, Mapping

from ..drivers.base import Claim, ClaimedJob, JobDriver, TenantRoom
from ..drivers.fair import FairClaim, fair_of
from ..errors import InvalidOption
from ..fairness import queue_weights
from ..registry import JobHandle


class Claimer:
    def __init__(self, driver: JobDriver, identity: str, lease_ms: float) -> None:
        self._driver = driver
        self._identity = identity
        self._lease_ms = lease_ms
        self.names: list[str] = []
        self.caps: dict[str, int] = {}
        self.capped_queues: set[str] = set()
        self.fair: dict[str, dict[str, float]] = {}   # fair queue -> key -> weight
        self._fair = fair_of(driver)                   # the driver's fair claims (None: it has none)

    def configure(self, handles: Mapping[str, JobHandle], queues: Collection[str]) -> None:
        """What this worker's registry declares for its ``queues``."""
        # claims take only names this process has bodies for: in a rolling deploy an old worker
        # leaves a new job type to the new workers instead of failing its attempts
        self.names = sorted(handles)
        self.caps = {h.name: h.concurrency for h in handles.values()
                     if h.concurrency is not None and h.queue in queues}
        self.capped_queues = {h.queue for h in handles.values() if h.name in self.caps}
        self.fair = {q: w for q, w in queue_weights(h.declared for h in handles.values()).items() if q in queues}
        if self.fair and self._fair is None:
            raise InvalidOption("fairness", f"queue(s) {', '.join(sorted(self.fair))} claim fairly, and this "
                                            f"driver ({type(self._driver).__name__}) has no fair claims")

    def claim(self, queue: str, free: int, tenants: TenantRoom | None, poll: bool) -> list[ClaimedJob]:
        """Up to ``free`` jobs of ``queue``; ``poll``: this pass is the worker's poll."""
        fair = self._fair
        if queue in self.fair and fair is not None:
            jobs = fair.job_claim_fair(FairClaim(queue, free, self._lease_ms, self._identity,
                                                 self.fair[queue], self.names))
            if jobs or not poll:
                return jobs
        return self._driver.job_claim(Claim([queue], free, self._lease_ms, self._identity,
                                            caps=self.caps, tenants=tenants, names=self.names))


__all__ = ["Claimer"]
