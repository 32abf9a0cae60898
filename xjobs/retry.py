"""Retry policy and the retry decision.

The decision reads the ERROR as well as the attempt count:

* ``Terminal``        -> dead now, whatever attempts remain;
* ``RetryAfter(s)``   -> retry after ``s`` seconds, clamped to the policy's ``max_delay``;
* a type the job lists in ``terminal_on`` -> dead now; with ``retry_on`` given, a type it
  does NOT list -> dead now (an exception matching both is judged by the nearer class in its
  MRO: ``terminal_on=(HTTPError,), retry_on=(TooManyRequests,)`` retries the subclass);
* anything else       -> the policy's backoff curve.

Third-party exceptions are classified by these declarations, never by attributes they happen
to carry: an unclassified error follows the policy. ``DEFAULT_RETRY`` (5 attempts, 1 s doubling
to at most 10 min, equal jitter) is durable API, pinned by a test. ``retry_schedule(policy)``
lists the delays a policy waits. The curve and its jitter are implemented once, here; the
supervisor's restart backoff is a ``Retry`` too.

Attempts are 1-based: attempt 1 is the first run. The curve's delay is clamped to
``max_delay`` BEFORE jitter, and jitter is EQUAL jitter (half fixed, half random), so a
retry never waits longer than ``max_delay`` and never less than half the curve.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from .errors import InvalidOption, RetryAfter, Terminal
from .options import duration_ms, finite_count

BACKOFFS = ("exponential", "linear", "constant")


class Retry:
    """``Retry(attempts=5, delay="2s", max_delay="10m", backoff="exponential", jitter=True)``."""

    __slots__ = ("attempts", "delay_ms", "max_delay_ms", "backoff", "jitter")

    def __init__(self, attempts: int = 5, delay: object = "1s", max_delay: object = "10m",
                 backoff: str = "exponential", jitter: bool = True) -> None:
        self.attempts = finite_count(attempts, "retry.attempts", minimum=1, maximum=10_000)
        self.delay_ms = duration_ms(delay, "retry.delay")
        self.max_delay_ms = duration_ms(max_delay, "retry.max_delay")
        if self.max_delay_ms < self.delay_ms:
            raise InvalidOption("retry.max_delay", "must be at least retry.delay")
        if backoff not in BACKOFFS:
            raise InvalidOption("retry.backoff", f"must be one of {', '.join(BACKOFFS)}, got {backoff!r}")
        if not isinstance(jitter, bool):
            raise InvalidOption("retry.jitter", "must be True or False")
        self.backoff = backoff
        self.jitter = jitter

    def __repr__(self) -> str:
        return (f"Retry(attempts={self.attempts}, delay={self.delay_ms:g}ms, "
                f"max_delay={self.max_delay_ms:g}ms, backoff={self.backoff!r}, jitter={self.jitter})")

    def curve_ms(self, attempt: int) -> float:
        """The un-jittered, clamped delay after the ``attempt``-th (1-based) failure."""
        if self.backoff == "exponential":
            # cap the exponent: 2**1000 overflows a float long after any clamp applies
            raw = self.delay_ms * (2.0 ** min(attempt - 1, 64))
        elif self.backoff == "linear":
            raw = self.delay_ms * attempt
        else:
            raw = self.delay_ms
        return min(raw, self.max_delay_ms)

    def delay_after(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        clamped = self.curve_ms(attempt)
        if not self.jitter:
            return clamped
        half = clamped / 2.0
        return half + rand() * half


DEFAULT_RETRY = Retry()


@dataclass(frozen=True)
class RetryVerdict:
    """What to do with a failed attempt; ``reason`` lands in ``last_error``."""

    dead: bool
    delay_ms: float
    reason: str


def retry_schedule(policy: Retry) -> list[tuple[float, float]]:
    """The wait after each failed attempt but the last, in seconds, as (least, most): the
    curve clamped to ``max_delay``, and with jitter anywhere from half of it to all of it."""
    waits = []
    for attempt in range(1, policy.attempts):
        most = policy.curve_ms(attempt) / 1000.0
        waits.append((most / 2.0 if policy.jitter else most, most))
    return waits


ErrorTypes = tuple[type[BaseException], ...]


def check_error_types(value: object, option: str) -> ErrorTypes:
    """A job's ``retry_on``/``terminal_on``: a tuple (or list) of exception classes."""
    if isinstance(value, type):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in value):
        raise InvalidOption(option, f"must be a tuple of exception classes, got {value!r}")
    return tuple(value)


def _nearest(error: BaseException, types: ErrorTypes) -> int | None:
    """How far up the error's MRO the nearest listed class is (None: none is)."""
    for depth, cls in enumerate(type(error).__mro__):
        if cls in types:
            return depth
    return None


def decide(policy: Retry, attempt: int, max_attempts: int, error: BaseException,
           rand: Callable[[], float] = random.random, *, retry_on: ErrorTypes = (),
           terminal_on: ErrorTypes = ()) -> RetryVerdict:
    """The one retry decision. ``max_attempts`` is the row's (it may outlive a policy change)."""
    if isinstance(error, Terminal):
        return RetryVerdict(True, 0.0, "dead: terminal error, not retried")
    if not isinstance(error, RetryAfter) and (retry_on or terminal_on):
        terminal, retryable = _nearest(error, terminal_on), _nearest(error, retry_on)
        if terminal is not None and (retryable is None or terminal < retryable):
            return RetryVerdict(True, 0.0, f"dead: {type(error).__name__} is in terminal_on, not retried")
        if retry_on and retryable is None:
            return RetryVerdict(True, 0.0, f"dead: {type(error).__name__} is not in retry_on, not retried")
    if attempt >= max_attempts:
        return RetryVerdict(True, 0.0, f"dead: attempts exhausted ({attempt}/{max_attempts})")
    if isinstance(error, RetryAfter):
        seconds = error.seconds
        try:
            stated = float(seconds) * 1000.0
        except (TypeError, ValueError):
            stated = policy.curve_ms(attempt)
        if not (stated >= 0.0):  # NaN or negative: fall back to the curve
            stated = policy.curve_ms(attempt)
        delay = min(stated, policy.max_delay_ms)
        return RetryVerdict(False, delay, f"retry {attempt + 1}/{max_attempts} in {delay / 1000:.3f}s (retry-after)")
    delay = policy.delay_after(attempt, rand)
    return RetryVerdict(False, delay, f"retry {attempt + 1}/{max_attempts} in {delay / 1000:.3f}s")
