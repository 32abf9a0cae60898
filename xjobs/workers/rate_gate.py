"""The fleet-wide rate gate of a worker: ``job(rate="N/period", rate_key=...)`` counted in the
database (``drivers/rate_keys.py``), one statement per claimed batch.

::

    claimed batch ──gate(jobs): rate_take for its rated jobs (ONE statement)──> decisions by id
        │
        └──admit(job) (Admission, after the per-process limits and the slot):
               granted ──> the body runs (its start counted in the key's window)
               refused ──> SHED until the window's next opening (no attempt spent, no
                           last_error), so no worker claims it again before then
               store unreachable ──> SHED for the poll interval (never run unbounded)

Nothing announces a window's opening (a NOTIFY is sent by a statement, and an opening is
none), so the worker claims again no later than the end of the first window its batch counted
in: one claim per window per worker at most, instead of the poll interval's wait.

A job claimed outside a batch (a suspect of a crash) is asked for on its own. A start granted
to a job that is then shed for another reason (a per-process limit, a fleet-wide slot) is
not given back: its window counts one start more than ran, which is the safe side. The
per-process limits (``limiter.py``) stay the fast local gate in front of this one.
"""

from __future__ import annotations

import logging
import math
from typing import Iterable, Mapping, Sequence

from ..drivers.base import ClaimedJob
from ..drivers.rate_keys import RateAsk, RateGrant, RateKeyStore, rate_keys_of
from ..logs import event
from ..rate_keys import RateLimit, RateUnenforceable
from ..registry import JobHandle

log = logging.getLogger("xjobs.worker")
_UNREACHABLE = RateGrant(0, False, -1.0)   # the store failed: shed for the poll interval


class RateGate:
    def __init__(self, store: RateKeyStore | None, rates: Mapping[str, RateLimit], identity: str) -> None:
        self._store = store
        self.rates = dict(rates)            # job name -> its declared rate
        self._identity = identity
        # what the batch's statement answered, by job id (None: a row with no key, enqueued
        # before its job declared a rate: it is not counted)
        self._decided: dict[int, RateGrant | None] = {}

    @classmethod
    def of(cls, driver: object, handles: Iterable[JobHandle], identity: str) -> "RateGate":
        """The gate of the jobs ``handles`` declare a rate for; refused when some do and the
        driver has no rate-key store (the rate would silently do nothing)."""
        rates = {h.name: h.rate for h in handles if h.rate is not None}
        store = rate_keys_of(driver)
        if rates and store is None:
            raise RateUnenforceable(
                f"job(s) {', '.join(sorted(rates))} declare rate, and this driver "
                f"({type(driver).__name__}) has no rate-key store to count it in")
        return cls(store, rates, identity)

    def gate(self, jobs: Sequence[ClaimedJob]) -> float:
        """Ask for the starts of a claimed batch's rated jobs in one statement; ``admit``
        answers each from what it granted. Answers the ms until the first of the windows it
        counted in ends (inf: none): more jobs of its key may be held back until then, and
        nothing announces a window's opening, so the worker claims again no later."""
        self._decided.clear()
        rated = [job for job in jobs if job.name in self.rates]
        if not rated:
            return math.inf
        taken = self._take(rated)
        self._decided = {job.id: taken.get(job.id) for job in rated}
        return min((g.next_ms for g in taken.values() if not unreachable(g)), default=math.inf)

    def admit(self, job: ClaimedJob) -> RateGrant | None:
        """The job's grant (None: it declares no rate, or has no key and so is not counted)."""
        if job.name not in self.rates:
            return None
        if job.id in self._decided:
            return self._decided.pop(job.id)
        return self._take([job]).get(job.id)

    def _take(self, jobs: Sequence[ClaimedJob]) -> dict[int, RateGrant]:
        assert self._store is not None   # of() refuses rates without a store
        asks = [RateAsk(job.id, job.token, self.rates[job.name].cap, self.rates[job.name].period_ms)
                for job in jobs]
        try:
            return {grant.job_id: grant for grant in self._store.rate_take(asks)}
        except Exception as exc:   # no start we can prove: shed rather than run over the rate
            event(log, logging.WARNING, "worker.rate.take.failed", "worker %s: taking starts of %d rated "
                  "job(s) failed, shedding them: %s", self._identity, len(jobs), exc,
                  error=str(exc), worker=self._identity)
            return {job.id: _UNREACHABLE for job in jobs}


def unreachable(grant: RateGrant) -> bool:
    return grant.next_ms < 0


__all__ = ["RateGate", "unreachable"]
