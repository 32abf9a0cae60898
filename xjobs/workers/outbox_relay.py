"""The outbox relay: publishes staged outbox rows into the queue, exactly once.

::

    accepting ──notification or poll──> pass: claim a batch (a lease, in (staged_at, id)
        │                                order) ──> enqueue it and mark it published in ONE
        │                                transaction, fenced on the claim ──> again while a
        │                                full batch came back
        │                                 └─ publish failed: release the batch (fenced), back
        │                                    off a poll; a failed claim is logged, never fatal
        └─ stop_accepting ──> no new pass ──close──> nothing is held between passes

A relay killed mid-batch holds rows nobody publishes until its claim's lease runs out; then
any relay (this one restarted, or another daemon's) claims them again. Because the enqueue
and the mark commit together, a batch is either published (its jobs exist, the rows say so)
or not at all: never twice, never lost. Every knob is checked once, here, at construction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..clock import monotonic_ms
from ..config import Settings
from ..drivers.base import JobDriver, JobListener, OutboxClaim
from ..logs import event
from ..options import duration_ms, finite_count
from .role import RoleBase, RoleContext, RolePolicy
from .telemetry import RoleStats

log = logging.getLogger("xjobs.outbox")

DEFAULT_BATCH = 500
_FAILURE_BACKOFF_MS = 1_000.0
_PASS_BUDGET_MS = 1_000.0   # a pass yields to the host loop this often while a backlog lasts


@dataclass
class RelayStats(RoleStats):
    published: int = 0        # rows published, each now a job
    batches: int = 0
    claim_failed: int = 0
    publish_failed: int = 0   # batches whose publish failed (released again)
    released: int = 0         # rows those failures gave back
    fenced: int = 0           # batches another relay had claimed meanwhile

    def describe(self) -> str:
        return (f"{self.published} published in {self.batches} batch(es), "
                f"{self.publish_failed + self.claim_failed} failure(s)")


class OutboxRelay(RoleBase):
    role = "outbox-relay"
    # a pass is short and leaves nothing held: let it end
    policy = RolePolicy(drain="finish", stats=RelayStats)

    def __init__(self, *, driver: JobDriver, identity: str, settings: Settings | None = None,
                 batch: object = DEFAULT_BATCH, poll: object = None,
                 clock: Callable[[], float] = monotonic_ms) -> None:
        super().__init__(identity)
        self.driver = driver
        self.identity = identity
        self.settings = settings or Settings()
        self.batch = finite_count(batch, "outbox.batch", minimum=1, maximum=10_000)
        self.lease_ms = duration_ms(self.settings.outbox_lease_ms, "outbox.lease", exclusive_minimum=True)
        self.poll_ms = duration_ms(self.settings.poll_ms if poll is None else poll, "outbox.poll",
                                   exclusive_minimum=True)
        self.clock = clock
        self.state = "new"
        self.accepting = False
        self.totals = {"published": 0, "batches": 0, "claim_failed": 0, "publish_failed": 0,
                       "released": 0, "fenced": 0}
        self._listener: JobListener | None = None
        self._next_pass = 0.0

    @classmethod
    def build(cls, context: RoleContext) -> "OutboxRelay":
        return cls(driver=context.connect(pool_size=2), identity=context.identity, settings=context.settings)

    def initialize(self) -> None:
        if self.state != "new":
            return
        self._listener = self.driver.outbox_listen()
        self.accepting = True
        self.state = "accepting"

    def wakeup_fds(self) -> Sequence[int]:
        if self._listener is not None and (fd := self._listener.fileno()) is not None:
            return (fd,)
        return ()

    def in_flight(self) -> int:
        return 0          # a pass claims and publishes before it returns: nothing is held after it

    def stats(self) -> RelayStats:
        return RelayStats(**self.totals)

    def stop_accepting(self, reason: str = "drain", interrupt: bool = True,
                       deadline_ms: float | None = None) -> None:
        if self.accepting:
            self.accepting = False
            self.state = "draining"

    def close(self, deadline_ms: float | None = None) -> None:
        if self.state in ("stopped", "closing"):
            return
        self.accepting = False
        self.state = "closing"
        try:
            if self._listener is not None:
                self._listener.close()
        finally:
            self.state = "stopped"
            self.driver.close()

    def run_once(self, now_ms: float) -> float:
        notified = bool(self._listener.poll()) if self._listener is not None else False
        if self.accepting and (notified or now_ms >= self._next_pass):
            self._next_pass = now_ms + (self.publish() if self.accepting else self.poll_ms)
        return max(0.0, self._next_pass - now_ms)

    def publish(self) -> float:
        """Publish batches until one comes back short, or for at most ``_PASS_BUDGET_MS``;
        answers how long to wait for the next pass (a poll, a back-off after a failure, or
        nothing when a backlog is left: the host loop hears its supervisor, a drain included,
        between passes, so a long backlog never makes the relay deaf). The budget is the one
        time read inside a pass: how long the pass itself has taken."""
        began = self.clock()
        while self.accepting:
            try:
                claim = self.driver.outbox_claim(self.identity, self.batch, self.lease_ms)
            except Exception as exc:      # the database is away: try again after a back-off
                self.totals["claim_failed"] += 1
                event(log, logging.WARNING, "relay.claim.failed", "outbox relay %s: claiming a batch failed: %s",
                      self.identity, exc, error=str(exc), relay=self.identity)
                return _FAILURE_BACKOFF_MS
            if not claim.ids:
                return self.poll_ms
            try:
                published = self.driver.outbox_publish(claim)
            except Exception as exc:
                self.totals["publish_failed"] += 1
                event(log, logging.ERROR, "relay.publish.failed", "outbox relay %s: publishing %d row(s) "
                      "failed; handing them back: %s", self.identity, len(claim.ids), exc,
                      count=len(claim.ids), error=str(exc), relay=self.identity)
                self._release(claim)
                return _FAILURE_BACKOFF_MS
            if published is None:        # the claim was taken over (this relay stalled past it)
                self.totals["fenced"] += 1
                event(log, logging.WARNING, "relay.publish.fenced", "outbox relay %s: %d row(s) were claimed "
                      "by another relay meanwhile; nothing published", self.identity, len(claim.ids),
                      count=len(claim.ids), relay=self.identity)
                continue
            self.totals["published"] += len(claim.ids)
            self.totals["batches"] += 1
            if len(claim.ids) < self.batch:
                return self.poll_ms
            if self.clock() - began >= _PASS_BUDGET_MS:
                return 0.0
        return self.poll_ms

    def _release(self, claim: OutboxClaim) -> None:
        try:
            self.totals["released"] += self.driver.outbox_release(claim)
        except Exception as exc:   # the claim's lease hands the rows back in the end
            event(log, logging.WARNING, "relay.release.failed", "outbox relay %s: releasing a batch failed "
                  "(its lease frees it): %s", self.identity, exc, error=str(exc), relay=self.identity)


def relay_row(children: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The relay among the children ``xjobsd status`` lists, if the daemon runs one."""
    return next((child for child in children if child.get("role") == OutboxRelay.role), None)
