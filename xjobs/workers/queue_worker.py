"""The queue worker: claims jobs, runs them through the executor, has them settled in batches.

A role like every other (``role.py``): its host drives its passes, its drain and its close
(``host.Lifecycle``), and its policy says the supervisor runs one group per queue, scales and
recycles it, and hands a dead child's jobs back. The worker keeps the pass, the claiming and
the executor, and hands the rest to collaborators it owns, each in its own module:

* ``runs``       (``runs.py``)       the runs it holds and each queue's busy slots;
* ``results``    (``execute.py``)    finished bodies, handed over from their threads;
* ``settler``    (``settle.py``)     what finished, timed-out and abandoned runs write;
* ``leases``     (``leases.py``)     lease renewal, lost leases, and the lease watch thread;
* ``quarantine`` (``quarantine.py``) suspects of a crash, run with nothing beside them;
* ``admission``  (``admission.py``)  per-process limits and fleet-wide slots: run now, or shed;
* ``claimer``    (``claiming.py``)   one queue's claim: in arrival order, or shared out by key;
* ``upkeep``     (``upkeep.py``)     wake, rescue, prune and age on timers, when ``maintain``.

One pass (``run_once``), all on the loop thread:

1. settle what finished since the last pass: acks go out as ONE statement per pass;
2. time out runs past their deadline (cancel first, then fail the attempt);
3. renew every held lease in one statement when a renewal is due, or at once when an
   operator's cancel of a run held here was heard; a lease the database no longer matches, or
   one with no renewal landing for a whole window on this process's clock, is LOST: the run's
   signal is aborted and nothing it does is written;
4. write the latest progress reports, at most once a second;
5. start a reserved suspect once it would run alone, or give it back;
6. while accepting, claim per queue up to that queue's free slots, one queue per statement,
   so a slow queue only ever fills its own slots and never starves another (a suspect, when
   one is due, is reserved instead, and while one is held nothing else is claimed);
7. wake due suspensions, rescue lapsed leases and prune old rows, on their timers
   (``maintain``: a worker on its own does; under ``xjobsd`` the scheduler's leader does it
   for the whole fleet, so its cost does not grow with the number of worker processes).

A lease watch thread aborts the signal of any run whose lease window closed, even while this
loop is blocked in a database call.

The claim timer re-arms on the pass, not on the jobs: a pass that found a full batch asks
again at once, one that found less waits for a notification or the poll interval.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping, Sequence

from ..aging import queue_agings
from ..clock import monotonic_ms
from ..config import Settings
from ..context import DRAINED
from ..drivers.base import ClaimedJob, JobDriver, JobListener, SlotStore, TenantRoom
from ..errors import ConcurrencyUnenforceable, InvalidOption
from ..logs import event, run_fields
from ..options import finite_count, plain_name
from ..registry import JobHandle, Registry
from ..reporting import ErrorHook, Reporter
from ..retry import DEFAULT_RETRY
from .admission import Admission, Shed
from .claiming import Claimer
from .execute import Executor, Results, Run, RunHook, UnknownJob
from .leases import LeaseKeeper, slot_window_ms
from .quarantine import Quarantine
from .rates import RateReporter
from .process_hooks import WorkerHooks
from .role import RoleBase, RoleContext, RolePolicy, close_each, new_identity
from .runs import RunTable
from .settle import Settler
from .stats import WorkerStats
from .upkeep import Upkeep

log = logging.getLogger("xjobs.worker")
_REPORTED_RUNS = 20


class QueueWorker(RoleBase):
    role = "worker"
    policy = RolePolicy(per_queue=True, scalable=True, recyclable=True, hands_back_jobs=True,
                        drain="interrupt", stats=WorkerStats)

    @classmethod
    def build(cls, context: RoleContext) -> "QueueWorker":
        """A daemon's child: the loop's pool serves claim, ack, renewal and slots, every run's
        steps share a small pool whatever the slots, and a body in ``ctx.transaction()`` holds
        one connection while it is open (``docs/production/database.md``). The fleet's
        maintenance (rescue, prune) is the scheduler leader's, never a worker's, and the child
        exits right after its close, so what still runs at its deadline is handed back at once."""
        driver = context.connect(pool_size=2, step_pool_size=2, transaction_pool_size=context.concurrency)
        return cls(driver=driver, registry=context.registry, queue=context.queue,
                   concurrency=context.concurrency, settings=context.settings,
                   identity=context.identity, maintain=False, exits_after_close=True)

    def __init__(self, *, driver: JobDriver, registry: Registry, queue: str | None = None,
                 concurrency: int = 16, queues: Mapping[str, int] | None = None,
                 settings: Settings | None = None, identity: str | None = None,
                 clock: Callable[[], float] = monotonic_ms, maintain: bool = True,
                 context: RunHook | None = None, error_hooks: Sequence[ErrorHook] | None = None,
                 failures: ErrorHook | None = None, exits_after_close: bool = False) -> None:
        """``context``: a callable taking the run's ``ctx`` and answering a context manager that
        wraps every body (open a session, bind log fields); by default the registry's
        (``xjobs.run_context``). ``exits_after_close``: the process ends when ``close`` returns
        (a daemon child), so what still runs at the close deadline is handed back at once
        rather than one lease window later (``Settler.abandon``)."""
        if queues is None:
            if queue is None:
                raise InvalidOption("queue", "a worker needs a queue or a queues mapping")
            queues = {queue: concurrency}
        if not queues:
            raise InvalidOption("queues", "a worker needs at least one queue")
        # slots are read by the queue's own key: a queue may be called "constructor"
        slots = {plain_name(q, "queue"): finite_count(n, f"concurrency[{q}]", minimum=1, maximum=10_000)
                 for q, n in dict(queues).items()}
        super().__init__(identity or new_identity(self.role), next(iter(slots)) if len(slots) == 1 else None)
        self.driver = driver
        self.registry = registry
        self._hook = context if context is not None else registry.run_context
        self.settings = settings or Settings()
        self.clock = clock            # the loop's clock: every now_ms handed to run_once reads it
        self.maintain = maintain
        self.exits_after_close = exits_after_close
        self.stats_ = WorkerStats()
        self._initialized = False
        self.runs = RunTable(slots, finished=self._count_steps, vacated=self._vacated)
        self.results = Results()
        self._executor = Executor(sum(slots.values()), self.results.put, name=f"xjobs-{next(iter(slots))}")
        self.reporter = Reporter(registry.error_hooks if error_hooks is None else error_hooks, self.identity)
        self._bound_at: float | None = None    # a deadline every run gets (epoch s): a tick's
        self.settler = Settler(driver=driver, runs=self.runs, results=self.results,
                               executor=self._executor, stats=self.stats_, settings=self.settings,
                               identity=self.identity, reporter=self.reporter, failures=failures)
        self.leases = LeaseKeeper(driver=driver, runs=self.runs, stats=self.stats_,
                                  settings=self.settings, identity=self.identity)
        self.quarantine = Quarantine(driver=driver, runs=self.runs, settler=self.settler,
                                     executor=self._executor, take=self.take, stats=self.stats_,
                                     settings=self.settings, identity=self.identity)
        self.admission: Admission | None = None    # built at initialize, from the registry
        # a worker counts its sweeps; what they rescued is the scheduler's figure
        self.upkeep = Upkeep(driver=driver, settings=self.settings, who=f"worker {self.identity}",
                             count=lambda name, n: self.stats_.bump(name, n) if name == "sweeps" else None,
                             outbox=False, agings=queue_agings(registry.jobs()))
        self.rates = RateReporter(driver=driver, stats=self.stats_, queue_of=self._queue_of)
        self.hooks = WorkerHooks.of(registry, self.identity, self._executor.event_loop,
                                    self.settings.worker_stop_timeout_ms)
        self._listener: JobListener | None = None
        self._handles: dict[str, JobHandle] = {}
        self.claimer = Claimer(driver, self.identity, self.settings.lease_ms)
        self._caps: dict[str, int] = {}
        self._more: set[str] = set()
        self._next_poll = self._next_slots = 0.0
        self._rotation = 0
        self.passes = 0      # test hook: how many passes have completed

    # -- lifecycle -------------------------------------------------------------------------------

    def initialize(self) -> None:
        if self._initialized or self.closed:
            return
        handles = {h.name: h for h in self.registry.jobs()}
        served = {h.queue for h in handles.values()}
        idle = [q for q in self.runs.slots if q not in served]
        if idle:
            raise InvalidOption("queue", f"no registered job uses queue(s) {', '.join(map(repr, idle))}")
        self._handles = handles
        self.claimer.configure(handles, self.runs.slots)
        self._caps = self.claimer.caps
        self.quarantine.names = self.claimer.names
        slots = self.driver if isinstance(self.driver, SlotStore) else None   # a declared capability
        if self._caps and slots is None:
            # a driver of another make, without the slot store: the cap would silently do nothing
            raise ConcurrencyUnenforceable(
                f"job(s) {', '.join(sorted(self._caps))} declare concurrency, and this driver "
                f"({type(self.driver).__name__}) has no fleet-wide slot store to enforce it")
        self.hooks.start()   # the app's clients, built in this process before anything is claimed
        self.admission = Admission(slots=slots, identity=self.identity, caps=self._caps,
                                   limits=self.settings.limits, lease_ms=self.settings.lease_ms,
                                   retry_ms=self.settings.poll_ms, driver=self.driver, jobs=handles.values(),
                                   trust_ms=slot_window_ms(self.settings))
        self._listener = self.driver.job_listen(self.identity)   # new jobs, and cancels of ours
        self.leases.start(self.clock, self._executor.cancel)
        self._initialized = True
        self.accepting = True

    def _count_steps(self, run: Run) -> None:
        """A settled run's step counters, whoever settled it (a settlement, a lost lease, a
        timeout)."""
        steps = run.ctx.steps_used
        if steps is not None:
            self.stats_.steps(steps.counts)

    def _vacated(self, run: Run) -> None:
        assert self.admission is not None   # built by initialize, before any run is held
        if self.admission.release(run) or self.admission.limited:
            # the slot or the limit's room it freed can start a waiting job now: claim at once
            # rather than at the next poll (no notification says a slot or a limit came free)
            self._more.add(run.job.queue)

    def wakeup_fds(self) -> Sequence[int]:
        fds = [self.results.fileno()]
        if self._listener is not None and (fd := self._listener.fileno()) is not None:
            fds.append(fd)
        return fds

    def in_flight(self) -> int:
        """What a drain waits for: bodies running, and settlements still to land."""
        return self.runs.in_flight() + len(self.runs.settling())

    def stats(self) -> WorkerStats:
        limits = None
        if self.admission is not None and (not self.settings.limits.unlimited or self._caps):
            limits = self.admission.snapshot()
        running = self.runs.reported(self.clock(), self.quarantine.holds, _REPORTED_RUNS)
        return self.stats_.snapshot(self.in_flight(), running, limits)

    def stop_accepting(self, reason: str = "drain", interrupt: bool = True,
                       deadline_ms: float | None = None) -> None:
        """Accept phase: stop claiming and, for a drain, tell every running body; returns at once.

        ``interrupt=False`` (a process being recycled, or retired by a scale-down) lets running
        bodies go on to the close deadline: interrupting them on every recycle would starve
        long jobs.
        ``deadline_ms`` (on the loop's clock): when the drain ends, what ``ctx.remaining()``
        counts down to from now on.
        """
        if deadline_ms is not None:
            self.bound_runs(deadline_ms)
        if interrupt:
            self.interrupted = self.interrupted or reason
            for run in list(self.runs.held.values()):
                run.signal.abort(DRAINED, f"worker {self.identity} is draining ({reason})")
        if not self.accepting:
            return
        event(log, logging.INFO, "worker.drain.signalled", "worker %s: draining (%s), %d run(s) %s",
              self.identity, reason, len(self.runs.held), "told to stop" if interrupt else "left to finish",
              reason=reason, interrupted=interrupt, runs=len(self.runs.held), worker=self.identity)
        self.accepting = False

    def bound_runs(self, deadline_ms: float) -> None:
        """Every run, held now or claimed later, must end by ``deadline_ms`` (the loop's clock):
        what ``ctx.remaining()`` counts down to (a drain's end, a tick's deadline)."""
        at = time.time() + (deadline_ms - self.clock()) / 1000.0
        self._bound_at = at if self._bound_at is None else min(self._bound_at, at)
        for run in list(self.runs.held.values()):
            run.ctx.bound(self._bound_at)

    def close(self, deadline_ms: float | None = None, now: Callable[[], float] | None = None) -> None:
        """Close phase, once the host's drain is over (``host.Lifecycle``): settle what finished,
        hand back what still runs (``Settler.abandon``), give up settlements that never landed,
        and close every resource. Waits for nothing; ``deadline_ms`` is the drain's, already
        spent. ``now`` reads the time for what it writes (the loop's clock by default)."""
        if self.closed:
            return
        self.accepting = False
        self.closed = True
        if not self._initialized:
            self._close_resources()
            return
        clock = now or self.clock
        try:
            self.settler.settle(clock())
            self.settler.abandon(clock(), at_once=self.exits_after_close)
            self.settler.retries.give_up(clock())
        finally:  # a close that failed half-way still lets go of every resource it holds
            self._close_resources()

    def _close_resources(self) -> None:
        """Let go of every resource, even one after a failed close; the first failure is raised last."""
        close_each([self.rates.flush, self.leases.stop, self.reporter.close, self.hooks.stop,
                    self._executor.shutdown, *([self._listener.close] if self._listener is not None else []),
                    self.results.close, self.driver.close])

    # -- one pass ------------------------------------------------------------------------------

    def run_once(self, now_ms: float) -> float:
        notified: set[str] = set()
        if self._listener is not None:
            notified = self._listener.poll()
            self.leases.recall(self._listener.cancels())
        self.settler.settle(now_ms)
        self.settler.expire(now_ms)
        self.settler.report_overruns(now_ms)
        self.leases.keep(now_ms)
        if self.admission is not None and self.admission.holds_slots and now_ms >= self._next_slots:
            self._next_slots = now_ms + self.settings.heartbeat_ms
            if self.admission.renew(self._executor.cancel, now_ms):
                self._more.update(self.runs.slots)     # a slot came free: a capped job may start
        self.settler.report_progress(now_ms)
        self.rates.report(now_ms)
        self.quarantine.advance(now_ms, self.accepting)
        if self.accepting:
            self._claim(now_ms, notified)
        if self.maintain:
            self.upkeep.run(now_ms)
        self.passes += 1
        return self._sleep_ms(now_ms)

    def _queue_of(self, job: str) -> str:
        handle = self._handles.get(job)
        return handle.queue if handle is not None else (self.queue or next(iter(self.runs.slots)))

    def _sleep_ms(self, now_ms: float) -> float:
        if self.results.waiting() or (self.accepting and not self.quarantine.holding
                                      and any(self.runs.free(q) > 0 for q in self._more)):
            return 0.0
        if self.quarantine.due and self.accepting:
            return 0.0
        due = [self.leases.next_due()]
        if self.maintain:
            due.append(self.upkeep.next_due())
        if self.admission is not None and self.admission.holds_slots:
            due.append(self._next_slots)
        if self.accepting:
            due.append(self._next_poll)
        if (settle_at := self.settler.next_due()) is not None:
            due.append(settle_at)
        return max(0.0, min(due) - now_ms)

    def _claim(self, now_ms: float, notified: set[str]) -> None:
        poll_due = now_ms >= self._next_poll
        if poll_due:
            self._next_poll = now_ms + self.settings.poll_ms
        if self.quarantine.holding:
            return   # a suspect runs with nothing beside it, or waits to
        queues = list(self.runs.slots)
        self._rotation = (self._rotation + 1) % len(queues)
        order = queues[self._rotation:] + queues[:self._rotation]
        if (poll_due or self.quarantine.due) and self.quarantine.reserve(now_ms, order):
            return
        assert self.admission is not None   # built by initialize
        tenants: TenantRoom | None = None
        asked = False
        for queue in order:
            free = self.admission.claim_room(queue, self.runs.free(queue))
            if free <= 0:
                if self.runs.free(queue) <= 0 and (queue in notified or queue in self._more):
                    # every slot busy: what woke it, or the rest of a full batch, is claimed as
                    # soon as a run's end frees a slot (nothing else would say it is waiting)
                    self._more.add(queue)
                else:
                    self._more.discard(queue)   # held by a limit: a run's end makes room (_vacated)
                continue
            if not (poll_due or queue in notified or queue in self._more):
                continue
            if not asked:
                tenants, asked = self.admission.tenant_room(now_ms), True
            try:
                jobs = self.claimer.claim(queue, free, tenants, poll_due)
            except Exception as exc:  # the database is away: the poll timer retries
                self.stats_.bump("claim_failed")   # visible: xjobs_claim_failures_total
                event(log, logging.WARNING, "worker.claim.failed", "worker %s: claim on %r failed: %s",
                      self.identity, queue, exc, queue=queue, error=str(exc), worker=self.identity)
                self._more.discard(queue)
                continue
            # a full batch may have more behind it; so may a short one where capped jobs or a
            # tenant's jobs were held back to their room (the next claim answers none once
            # nothing more can start)
            if len(jobs) == free or (jobs and (queue in self.claimer.capped_queues or tenants is not None)):
                self._more.add(queue)
            else:
                self._more.discard(queue)
            self.stats_.bump("claimed", len(jobs))
            # a batch's rated starts in one statement; the window a take counted in may hold
            # back more of its key, so the next claim is no later than that window's end (read
            # from the clock after the answer: the window is timed by the statement, never early)
            self._next_poll = min(self._next_poll, self.admission.gate(jobs) + self.clock())
            runs = [run for run in (self.take(job, now_ms) for job in jobs) if run is not None]
            if runs:
                self._executor.submit_many(runs)

    def take(self, job: ClaimedJob, now_ms: float) -> Run | None:
        """Hold a claimed job and answer its run, or settle it at once when nothing here can
        run it (answers None). Its body is not started: the caller submits it."""
        stale = self.runs.get(job.id)
        # cancelled and retried, or rescued, and handed to us again; or suspended by its own step
        # and woken already (that run settles as suspended when its body unwinds)
        if stale is not None and not stale.ctx.fence.suspending:
            self.leases.lost(stale, now_ms, "the job was handed out again")
        handle = self._handles.get(job.name)
        if handle is None:
            run = Run(job, UnknownJob(job.name, DEFAULT_RETRY), self.driver, now_ms, clock=self.clock)
            self.runs.hold(run)
            self.results.put(run, LookupError(f"no handler for job {job.name!r} in worker {self.identity}"))
            return None
        assert self.admission is not None   # built by initialize, before any claim
        admitted = self.admission.admit(job, now_ms, self.clock)
        if isinstance(admitted, Shed):
            self.settler.shed(job, admitted.delay_ms, admitted.why, now_ms)
            return None
        run = Run(job, handle, self.driver, now_ms, clock=self.clock, poke=self.results.poke,
                  hook=self._hook, result_limit=self.settings.max_result_bytes)
        if self._bound_at is not None:
            run.ctx.bound(self._bound_at)
        if log.isEnabledFor(logging.DEBUG):
            event(log, logging.DEBUG, "job.attempt.started", "job %s#%s attempt %s started", job.name,
                  job.id, job.attempt, **run_fields(job))
        self.admission.bind(run, admitted)
        self.runs.hold(run)
        return run


__all__ = ["QueueWorker"]
