"""The records of durable steps and the event bus (``base.py``: ``StepStore``, ``EventStore``):
a job's recorded steps, what a run writes through ``ctx.step``, and stored events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STEP_KINDS = ("run", "sleep", "wait", "map")
STEP_STATES = ("completed", "sleeping", "waiting")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step of a job: ``result`` is the stored JSON (a wait's event payload, None
    on its timeout); ``seq`` orders the steps of a job as they were first recorded;
    ``wake_at`` is when a sleep ends or a wait times out (None: a wait without a timeout)."""

    name: str
    kind: str
    state: str
    seq: int
    attempt: int
    result: Any
    started_at: float
    finished_at: float | None
    wake_at: float | None = None
    event: str | None = None
    event_key: str | None = None
    timed_out: bool = False

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "state": self.state, "attempt": self.attempt,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "duration_ms": (None if self.finished_at is None
                                else round(self.finished_at - self.started_at, 3)),
                "wake_at": self.wake_at, "event": self.event, "key": self.event_key,
                "timed_out": self.timed_out}


@dataclass(frozen=True, slots=True)
class StepLog:
    """Every recorded step of one job in ``seq`` order, read in ONE statement at the start of
    an attempt, and the database's now at that read. Whether a sleep is over is decided by
    ``step_sleep`` on the same clock, in the statement that acts on it, not from this reading."""

    now_ms: float
    steps: tuple[StepRecord, ...]


@dataclass(frozen=True, slots=True)
class StepResult:
    """A ``step.run`` that returned: its encoded JSON result and how long the call took."""

    name: str
    result: bytes
    attempt: int
    duration_ms: float


@dataclass(frozen=True, slots=True)
class StepSleep:
    """``step.sleep``: the first call records the wake-up time (now + ``duration_ms`` on the
    database's clock); every call completes the step once that time has come, or suspends the
    job until it."""

    name: str
    duration_ms: float
    attempt: int


@dataclass(frozen=True, slots=True)
class StepWait:
    """``step.wait_for_event``: completes with the first stored event of (``event``, ``key``),
    or with nothing once ``timeout_ms`` (counted from the first call) has passed; otherwise
    suspends the job until the event is sent, the timeout, or ``poll_ms`` from now."""

    name: str
    event: str
    key: str
    timeout_ms: float | None
    poll_ms: float | None
    attempt: int


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What a sleep or a wait came to: ``done`` (the step is completed: ``value`` is its result)
    or suspended (the job is suspended until ``wake_at``, its attempt not charged). ``fenced``:
    the run no longer owns the job; nothing was written."""

    done: bool
    value: Any = None
    wake_at: float | None = None
    timed_out: bool = False
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class NewEvent:
    name: str
    key: str
    payload: bytes        # encoded JSON, already checked and size-limited


@dataclass(frozen=True, slots=True)
class SentEvent:
    """A stored event, and how many suspended waiters it woke."""

    id: int
    woken: int
