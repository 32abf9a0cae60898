"""The memory driver's lower layer: the tables, their indexes and the one lock.

``MemoryTable`` is what the migrations install, held in dicts: ``jobs`` (``rows``, in id
order like the identity column) with ``job_history``, ``queues`` (``paused``) and
``crashed_workers``. What the database does for the SQL, it spells out:

- ids come from one counter that every *attempted* insert row consumes, deduplicated or not,
  as an identity column does under ``on conflict do nothing`` (``take_id``);
- ``live`` is the partial unique index ``jobs_idempotency_idx``: (name, tenant or '', key)
  over ready, running and suspended rows, kept in step by ``move``; ``windowed`` is
  ``jobs_dedupe_idx``, the completed rows of jobs that keep their key for a window;
- a ``timestamptz`` holds whole microseconds, so times are rounded exactly where the Postgres
  columns would round them (``ts``, ``plus``), or the two drivers drift apart on the values
  the conformance suite compares;
- its clock is always now: the injected clock plays the part of the server's.

One lock serialises every verb, which stands in for the row locks and ``skip locked``. The
nouns of the driver (``memory_jobs``, ``memory_maintenance``, ``memory_operator``,
``memory_queues``, ``memory_coordination``, ``memory_steps``) take ``lock`` around each verb
and change rows only through these methods where an index is involved. It is also the
driver's ``Storage``: nothing to migrate, always reachable.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from ..clock import Clock
from ..errors import DuplicateJob
from .base import FINISHED_STATES as SETTLED_STATES, LIVE_STATES, Storage
from .records import CANCEL_HOLDER_BYTES, ProgressReport

Namespace = tuple[str, str, str]        # (name, tenant or '', key): the idempotency namespace


def ts(ms: float) -> float:
    """A time as a ``timestamptz`` column holds it: whole microseconds."""
    return round(ms * 1000.0) / 1000.0


def plus(at: float, ms: float) -> float:
    """``{now} + ms * interval '1 millisecond'``: both sides in whole microseconds."""
    return ts(at + ts(ms))


@dataclass(slots=True)
class Row:
    """One row of ``jobs``."""

    id: int
    name: str
    queue: str
    state: str
    payload: bytes
    tenant: str | None
    enqueued_by: str | None
    idempotency_key: str
    priority: int
    max_attempts: int
    run_at: float
    created_at: float
    attempt: int = 0
    lease_token: int | None = None
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    last_error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    crashes: int = 0
    snoozes: int = 0                   # times it put itself back for later (xjobs.Snooze)
    suspect_group: int | None = None   # the half of a crashed process's jobs it is in
    dedupe_window_ms: float | None = None
    progress: ProgressReport | None = None
    traceparent: str | None = None
    result: bytes | None = None        # the completed body's return value, encoded (None: none)
    parent_id: int | None = None       # workflows (memory_fanins.py): the parent and its step,
    parent_step: str | None = None     # the fan-in this job counts towards and its index there
    fanin_id: int | None = None
    fanin_index: int | None = None
    concurrency_key: str | None = None   # concurrency by key (memory_keyed.py): the member's key,
    key_cap: int | None = None           # its job's concurrency there, whether a dead member keeps
    key_hold: bool = False               # its place, and the run_at it takes when let in (None:
    key_run_at: float | None = None      # it is not waiting)
    fair_key: str | None = None        # job(fairness=): the key of its turns (memory_fair.py)
    rate_key: str | None = None        # job(rate=...): the key its input gave (memory_rate_keys.py)
    base_priority: int | None = None   # job(aging=): its priority at enqueue, once job_age moved it

    @property
    def namespace(self) -> Namespace:
        return (self.name, self.tenant or "", self.idempotency_key)


def by_claim_order(row: Row) -> tuple[int, float, int]:
    """The order every claim takes ready rows in: (priority, run_at, id)."""
    return (row.priority, row.run_at, row.id)


@dataclass(slots=True)
class StepRow:
    """One row of ``job_steps``; ``result`` is the stored JSON, encoded as ``jsonb`` keeps it."""

    name: str
    kind: str
    state: str
    seq: int
    attempt: int
    started_at: float
    result: bytes | None = None
    finished_at: float | None = None
    wake_at: float | None = None
    event: str | None = None
    event_key: str | None = None
    timed_out: bool = False


class CancelHearer(Protocol):
    """A listener of the cancels of ``holder``'s running jobs (``memory_jobs.MemoryListener``)."""

    holder: str

    def hear(self, ids: Sequence[int]) -> None: ...


class KeyGate(Protocol):
    """What migration 14's triggers do to keyed rows (``memory_keyed.MemoryKeys``)."""

    def entered(self, row: Row) -> None: ...

    def moved(self, row: Row, was: str) -> None: ...

    def forgotten(self, row: Row) -> None: ...


class MemoryTable(Storage):
    server_clock = False   # no server: the injected clock is now in every verb

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.settled = threading.Condition()   # told when a job completes, dies or is cancelled
        self.rows: dict[int, Row] = {}
        self.history: dict[int, list[tuple[float, int, str, str | None, str | None]]] = {}
        self.live: dict[Namespace, int] = {}
        self.windowed: dict[Namespace, list[int]] = {}
        self.paused: dict[str, tuple[bool, float, str | None]] = {}   # the queues table
        self.rates: dict[tuple[str, float, str], int] = {}           # job_rates: (queue, minute, outcome) -> n
        self.crashed_workers: dict[str, float] = {}   # worker -> when seen dying beside others
        # the coordination tables (memory_coordination.py)
        self.leaders: dict[str, tuple[str, float, float]] = {}        # election -> holder, expires, elected
        self.watermarks: dict[str, tuple[int, float, int]] = {}       # task -> watermark, updated, dispatched
        self.outbox: dict[int, dict[str, Any]] = {}                   # id -> the outbox row
        self.slots: dict[tuple[str, int], tuple[str, float]] = {}     # (job, slot) -> holder, expires
        self.rate_keys: dict[tuple[str, str], tuple[float, float, int, int]] = {}   # (job, key) -> opens, period, cap, n
        # durable steps and stored events (memory_steps.py)
        self.steps: dict[int, dict[str, StepRow]] = {}                # job id -> name -> its step
        self.events: dict[int, tuple[str, str, bytes, float]] = {}    # id -> name, key, payload, sent
        self.events_by_key: dict[tuple[str, str], list[int]] = {}     # events_lookup_idx
        # the job listeners of holders: what job_cancel's NOTIFY reaches (a listener never closed
        # goes with its worker)
        self.hearers: weakref.WeakSet[CancelHearer] = weakref.WeakSet()
        # what the trigger jobs_fanin_settle does, run by move() (memory_fanins.py installs it)
        self.settle_hook: Callable[[Row, str], None] | None = None
        self.forget_hook: Callable[[int], None] | None = None     # and job_prune's fan-ins
        self.keys: KeyGate | None = None    # the triggers of keyed rows (memory_keyed.py installs them)
        # what the trigger fair_ready does when a fair row becomes ready (memory_fair.py)
        self.ready_hook: Callable[[Row], None] | None = None
        self._next_id = 1
        self._next_outbox_id = 1
        self._next_seq = 1
        self._next_event_id = 1

    def now(self) -> float:
        """``{now}``: the clock's reading as a ``timestamptz`` holds it."""
        return ts(self.clock.now_ms())

    def tell_cancelled(self, told: Mapping[str, Sequence[int]]) -> None:
        """What a cancel's notification says (holder -> the running jobs it cancelled), to that
        holder's listeners; under ``lock``, as a NOTIFY is part of its statement."""
        for hearer in list(self.hearers):
            ids = told.get(hearer.holder)
            if ids and len(hearer.holder.encode()) <= CANCEL_HOLDER_BYTES:
                hearer.hear(ids)

    def take_id(self) -> int:
        job_id, self._next_id = self._next_id, self._next_id + 1
        return job_id

    def take_outbox_id(self) -> int:
        outbox_id, self._next_outbox_id = self._next_outbox_id, self._next_outbox_id + 1
        return outbox_id

    def take_seq(self) -> int:
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq

    def take_event_id(self) -> int:
        event_id, self._next_event_id = self._next_event_id, self._next_event_id + 1
        return event_id

    def slots_held(self, job: str, at: float) -> int:
        """``count(*) from job_slots where job = ... and expires_at > now``."""
        return sum(1 for (name, _), (_, expires) in self.slots.items() if name == job and expires > at)

    def insert(self, row: Row) -> None:
        """A new ready row; its namespace is free (the caller looked). A keyed one goes in
        waiting for its key, as the insert's triggers put it."""
        self.rows[row.id] = row
        self.live[row.namespace] = row.id
        if self.keys is not None and row.concurrency_key is not None:
            self.keys.entered(row)
        if self.ready_hook is not None and row.fair_key is not None and row.state == "ready":
            self.ready_hook(row)

    def move(self, row: Row, state: str) -> None:
        """Change a row's state, keeping the live-namespace index in step; like the unique
        index, refuse a second live row of one namespace (callers look first)."""
        was_live, live = row.state in LIVE_STATES, state in LIVE_STATES
        if was_live and not live:
            self.live.pop(row.namespace, None)
        elif live and not was_live:
            holder = self.live.get(row.namespace)
            if holder is not None and holder != row.id:
                raise DuplicateJob(f"jobs_idempotency_idx: job {holder} already holds the key of job {row.id}")
            self.live[row.namespace] = row.id
        was = row.state
        row.state = state
        if self.ready_hook is not None and row.fair_key is not None and state == "ready" != was:
            self.ready_hook(row)
        if self.settle_hook is not None and was_live != live and (row.fanin_id is not None or state == "cancelled"):
            self.settle_hook(row, was)
        if self.keys is not None and row.concurrency_key is not None and was != state:
            self.keys.moved(row, was)
        if state in SETTLED_STATES:
            with self.settled:   # what job_ack_many's NOTIFY reaches: the waiters on results
                self.settled.notify_all()

    def key_held(self, row: Row) -> bool:
        """Whether another live job holds ``row``'s namespace."""
        return self.live.get(row.namespace, row.id) != row.id

    def held(self, job_id: int, token: int) -> Row | None:
        """The fence of every settling verb: ``state = 'running'`` and the claim's token."""
        row = self.rows.get(job_id)
        if row is None or row.state != "running" or row.lease_token != token:
            return None
        return row

    def record(self, job_id: int, at: float, attempt: int, outcome: str, error: str | None,
               traceback: str | None = None) -> None:
        """A row of ``job_history``."""
        self.history.setdefault(job_id, []).append((at, attempt, outcome, error, traceback))

    def complete(self, row: Row, at: float, result: bytes | None = None) -> None:
        row.result = result   # before the move, which wakes the waiters on it
        self.move(row, "completed")
        row.finished_at, row.lease_token, row.lease_expires_at = at, None, None
        row.last_error = None   # an earlier attempt's error stays in the history
        if row.dedupe_window_ms is not None:
            self.windowed.setdefault(row.namespace, []).append(row.id)

    def in_window(self, namespace: Namespace, at: float) -> int | None:
        """The newest completed job of ``namespace`` still inside its dedupe window."""
        inside = [i for i in self.windowed.get(namespace, ()) if self._window_open(self.rows[i], at)]
        return max(inside) if inside else None

    @staticmethod
    def _window_open(row: Row, at: float) -> bool:
        return (row.finished_at is not None and row.dedupe_window_ms is not None
                and plus(row.finished_at, row.dedupe_window_ms) > at)

    def forget(self, row: Row) -> None:
        """Delete a row and what indexes it (prune, a rolled-back transaction's insert)."""
        del self.rows[row.id]
        if self.forget_hook is not None:
            self.forget_hook(row.id)
        self.history.pop(row.id, None)
        self.steps.pop(row.id, None)
        if self.live.get(row.namespace) == row.id:
            del self.live[row.namespace]
        windowed = self.windowed.get(row.namespace)
        if windowed is not None and row.id in windowed:
            windowed.remove(row.id)
            if not windowed:
                del self.windowed[row.namespace]
        if self.keys is not None and row.concurrency_key is not None:
            self.keys.forgotten(row)

    def first_event(self, name: str, key: str, since: float) -> bytes | None:
        """``event_first``: the payload of the first event of (name, key) sent at or after
        ``since`` (the waiting job's creation)."""
        sent = [(self.events[i][3], i) for i in self.events_by_key.get((name, key), ())
                if self.events[i][3] >= since]
        return self.events[min(sent)[1]][2] if sent else None

    def suspended_waits(self) -> Iterator[tuple[Row, list[StepRow]]]:
        """Every suspended job with waits suspended on an event, in id order (the order every
        statement that locks several job rows takes them), with its waiting steps. Each job is
        looked at when its turn comes, so a caller may change the jobs it was given."""
        for job_id in sorted(self.steps):
            row = self.rows.get(job_id)
            if row is None or row.state != "suspended":
                continue
            waiting = [s for s in self.steps[job_id].values() if s.state == "waiting"]
            if waiting:
                yield row, waiting

    def forget_events(self, ids: list[int]) -> None:
        """Delete stored events (their retention passed, or their transaction rolled back)."""
        for event_id in ids:
            entry = self.events.pop(event_id, None)
            if entry is not None:
                self.events_by_key[(entry[0], entry[1])].remove(event_id)

    def is_paused(self, queue: str) -> bool:
        entry = self.paused.get(queue)
        return entry is not None and entry[0]

    # -- Storage: what a database would need, nothing here ------------------------------------

    def migrate(self, *, lock_timeout_ms: float = 10_000.0, upgrade: bool = True) -> list[str]:
        """Nothing to install: the tables exist as soon as the object does."""
        return []

    def ping(self, timeout_s: float) -> None:
        """Always reachable."""

    def close(self) -> None:
        """Nothing to let go of: rows stay readable after close, as tests expect."""
