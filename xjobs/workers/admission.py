"""What a claimed job must pass before its body starts: this process's limits, for a job
declared with ``concurrency=N`` one of its N fleet-wide slots, and for one declared with
``rate=`` a start in its key's window.

::

    claimed ──limits (limiter.py, per process)──> over: SHED
        │
        └──capped job: slot_acquire (one row per held slot, the primary key grants it)──> none: SHED
                │          (or granted only after the slot's window had closed, counted from the
                │           pass that claimed the job: a stall held the claim or the acquire: SHED)
                │
                └──held: the body runs; the slot is renewed with the leases, fenced on holder
                   AND expiry (a renewal answering False aborts the run: X_JOB_SLOT_LOST; one
                   that does not land in time ends the run's safe window, ``leases.py``);
                   released when the body ends, whatever the settlement (a failed release is
                   logged and retried with the renewals until its expiry would free it anyway,
                   never the run's failure)
                │
                └──rated job (job(rate=...)): its key's start, granted for the claimed batch
                   in one statement (rate_gate.py)──> refused: SHED to the window's next opening

A shed goes back to ready in its place in line, with no attempt burned and no ``last_error``,
counted as ``outcome="shed"``, through ONE path (``Settler.shed``) for both reasons. It does
not spin: the worker claims no more than the limits leave room for (``claim_room``), and a
claim skips a capped job whose every slot is held and takes no more of one than it has free
slots (``job_claim(caps=)``), and skips the jobs of a tenant at its ceiling and takes no more
of one than its room (``job_claim(tenants=)``), until a run ends and frees the room. The slot is held until the BODY ends,
not until the run settles: a timed-out ``def`` body that runs on still counts against the cap.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..context import SLOT_LOST
from ..drivers.base import ClaimedJob, Slot, SlotRequest, SlotStore, TenantRoom
from ..limits import Limits
from ..logs import event, run_fields
from ..registry import JobHandle
from .execute import Run
from .limiter import Decision, Limiter
from .rate_gate import RateGate, unreachable

log = logging.getLogger("xjobs.worker")


@dataclass(frozen=True, slots=True)
class Shed:
    """Why a claimed job does not start now, and when it may come back."""

    delay_ms: float
    why: str


@dataclass(frozen=True, slots=True)
class Admitted:
    """The job may start; ``slot`` is the fleet-wide slot it took (None: not a capped job)."""

    slot: int | None = None


class Admission:
    def __init__(self, *, slots: SlotStore | None, identity: str, caps: Mapping[str, int], limits: Limits,
                 lease_ms: float, retry_ms: float, driver: object = None, jobs: Iterable[JobHandle] = (),
                 trust_ms: float = math.inf) -> None:
        """``slots``: the driver's fleet-wide slot store (None: it has none, and then no job may
        declare a cap: the worker refuses that at start). ``jobs``: the handles whose declared
        rates the gate counts in ``driver``'s rate-key store (``rate_gate.py``). ``trust_ms``: how
        long after the pass's now a slot taken in it may be trusted (``leases.slot_window_ms``)."""
        self._store = slots
        self._identity = identity
        self.caps = dict(caps)                    # job name -> its fleet-wide concurrency
        self.limiter = Limiter(limits)
        self.rates = RateGate.of(driver, jobs, identity)
        self._lease_ms = lease_ms
        self._retry_ms = retry_ms                 # how long a shed waits when the slot store is away
        self._trust_ms = trust_ms
        self._slots: dict[int, tuple[Run, str, int]] = {}   # id(run) -> (run, job, slot)
        self._admitted: set[int] = set()                     # id(run) of runs the limiter counts
        # slots whose release failed: (job, slot, when its expiry frees it anyway; None until
        # the next renewal pass reads the clock)
        self._unreleased: list[tuple[str, int, float | None]] = []

    def gate(self, jobs: Sequence[ClaimedJob]) -> float:
        """A claimed batch's starts asked of the rate gate in one statement (``rate_gate.py``);
        answers the ms until the worker should claim again at the latest (inf: no bound)."""
        return self.rates.gate(jobs)

    def admit(self, job: ClaimedJob, now_ms: float, clock: Callable[[], float] | None = None) -> Admitted | Shed:
        """``Admitted`` (counted by the limiter, its slot taken, its start granted by its rate
        key) or ``Shed``; ``now_ms``: the pass's now, before its claim was sent, on ``clock`` (the
        loop's; None: not checked)."""
        admitted = self._admit(job, now_ms, clock)
        if isinstance(admitted, Shed):
            return admitted
        grant = self.rates.admit(job)
        if grant is None or grant.granted:
            return admitted
        self.refuse(job, admitted)   # the limiter's count and the slot go back
        if unreachable(grant):
            return Shed(self._retry_ms, "rate-key store unreachable")
        return Shed(grant.next_ms, f"rate of {job.name} ({self.rates.rates[job.name].text}): its key's "
                                   f"window is full, opens again in {grant.next_ms:.0f}ms")

    def _admit(self, job: ClaimedJob, now_ms: float, clock: Callable[[], float] | None) -> Admitted | Shed:
        decision: Decision = self.limiter.admit(job.tenant, job.queue, now_ms, retry_ms=self._retry_ms)
        if not decision.admitted:   # in its place in line; the next claim skips it while it has no room
            return Shed(0.0, f"per-process limit: {decision.reason}")
        cap = self.caps.get(job.name)
        if cap is None or self._store is None:
            return Admitted()
        try:
            slot = self._store.slot_acquire(SlotRequest(job.name, cap, self._identity, self._lease_ms))
        except Exception as exc:   # no slot we can prove: shed rather than run unbounded
            self.limiter.release(job.tenant, job.queue)
            event(log, logging.WARNING, "worker.slot.acquire.failed", "worker %s: taking a slot of %s "
                  "failed, shedding %s#%s: %s", self._identity, job.name, job.name, job.id, exc,
                  error=str(exc), worker=self._identity, **run_fields(job))
            return Shed(self._retry_ms, "slot store unreachable")
        if slot is None:
            self.limiter.release(job.tenant, job.queue)
            return Shed(0.0, f"all {cap} slot(s) of {job.name} are held")
        if clock is not None and (waited := clock() - now_ms) >= self._trust_ms:
            # the claim or the acquire came back after a stall: when the slot was granted is
            # unknown, so it counts from the pass's now, and its window closed before the body
            # would start (the holder it was taken over from may not have unwound yet)
            self.limiter.release(job.tenant, job.queue)
            self._release(job.name, slot)
            event(log, logging.WARNING, "worker.slot.stale", "worker %s: slot %d of %s#%s came %.0fms after "
                  "its claim was sent; giving it back", self._identity, slot, job.name, job.id, waited,
                  slot=slot, waited_ms=round(waited), worker=self._identity, **run_fields(job))
            return Shed(0.0, f"slot {slot} of {job.name} came back after its window closed")
        return Admitted(slot)

    def claim_room(self, queue: str, free: int) -> int:
        """How many of ``free`` run slots a claim on ``queue`` may fill under the limits."""
        room = self.limiter.room(queue)
        return free if room is None else min(free, room)

    def tenant_room(self, now_ms: float) -> TenantRoom | None:
        """What the tenant limits leave room for in a claim (None: no tenant limit): no job of a
        tenant at its ceiling or with a full rate window, and no more of one than its room."""
        return self.limiter.tenant_room(now_ms)

    @property
    def limited(self) -> bool:
        return not self.limiter.limits.unlimited

    def bind(self, run: Run, admitted: Admitted) -> None:
        """Record what ``admit`` granted the run's job (the limiter's count, and its slot)."""
        self._admitted.add(id(run))
        if admitted.slot is not None:
            self._slots[id(run)] = (run, run.job.name, admitted.slot)
            # taken in this pass, after the pass's now that the run starts from: the slot's
            # expiry on the server is no earlier than this plus its TTL
            run.slot_renewed_ms = run.started_ms

    def refuse(self, job: ClaimedJob, admitted: Admitted) -> None:
        """Undo an admission whose run never came to be (no handler for the job here)."""
        self.limiter.release(job.tenant, job.queue)
        if admitted.slot is not None:
            self._release(job.name, admitted.slot)

    def release(self, run: Run) -> bool:
        """The run's body ended: release its limiter count and its slot; answers whether a
        fleet-wide slot was freed (a capped job waiting for it may be claimed now)."""
        if id(run) in self._admitted:
            self._admitted.discard(id(run))
            self.limiter.release(run.job.tenant, run.job.queue)
        held = self._slots.pop(id(run), None)
        if held is None:
            return False
        _, job, slot = held
        return self._release(job, slot)

    def _release(self, job: str, slot: int) -> bool:
        """Give a slot back; a failure is logged and the release retried with the renewals
        (until then the slot counts against the cap, which is the safe side)."""
        if self._store is None:
            return False
        try:
            return bool(self._store.slot_release(Slot(job, slot, self._identity)))
        except Exception as exc:   # never the run's failure
            event(log, logging.WARNING, "worker.slot.release.failed", "worker %s: releasing slot %d of %s "
                  "failed; retried with the next renewal: %s", self._identity, slot, job, exc,
                  job=job, slot=slot, error=str(exc), worker=self._identity)
            self._unreleased.append((job, slot, None))
            return False

    def renew(self, cancel: Callable[[Run], None], now_ms: float) -> bool:
        """Renew every held slot (one whose renewal answers False aborts its run), and retry
        the releases that failed; answers whether a retried release freed a slot. A renewal
        that lands confirms the slot from ``now_ms`` (sent no earlier: the safe side); one that
        fails leaves the run's slot window to close (``leases.py``)."""
        store = self._store
        if store is None:
            return False
        for key, (run, job, slot) in list(self._slots.items()):
            try:
                kept = store.slot_renew(Slot(job, slot, self._identity), self._lease_ms)
            except Exception as exc:
                event(log, logging.WARNING, "worker.slot.renew.failed", "worker %s: renewing slot %d of %s "
                      "failed: %s", self._identity, slot, job, exc, job=job, slot=slot, error=str(exc),
                      worker=self._identity)
                continue
            if not kept:
                self._slots.pop(key, None)
                event(log, logging.ERROR, "worker.slot.lost", "worker %s: slot %d of %s#%s is no longer "
                      "held; stopping the run", self._identity, slot, job, run.job.id, slot=slot,
                      worker=self._identity, **run_fields(run.job))
                if run.signal.abort(SLOT_LOST, f"slot {slot} of {job} lost"):
                    cancel(run)
            elif run.slot_renewed_ms != math.inf:   # inf: told its window closed; it stays told
                run.slot_renewed_ms = now_ms
        return self._retry_releases(store, now_ms)

    def _retry_releases(self, store: SlotStore, now_ms: float) -> bool:
        pending, self._unreleased = self._unreleased, []
        freed = False
        for job, slot, expires in pending:
            if expires is not None and now_ms >= expires:
                continue      # its expiry has freed it: nothing left to release
            try:
                freed = bool(store.slot_release(Slot(job, slot, self._identity))) or freed
            except Exception:
                self._unreleased.append((job, slot, now_ms + self._lease_ms if expires is None else expires))
        return freed

    @property
    def holds_slots(self) -> bool:
        """Whether a renewal pass has work: slots held, or releases to retry."""
        return bool(self._slots) or bool(self._unreleased)

    def snapshot(self) -> dict[str, Any]:
        return {**self.limiter.snapshot(), "slots_held": len(self._slots)}
