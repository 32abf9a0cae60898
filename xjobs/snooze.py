"""Snooze and debounce: a job put back for later by its own body, and an enqueue that moves
a not-yet-started job instead of adding one.

``raise xjobs.Snooze("5m")`` (or ``return ctx.snooze("5m")``) ends the attempt as neither a
success nor a failure: the job is ready again at now + d (on the database's clock), its
attempt is given back, ``last_error`` is left alone, and its history and ``jobs_total`` say
``snoozed``. The row counts its snoozes; the snooze past ``job(max_snoozes=N)`` (default 100)
dead-letters it with ``X_SNOOZE_LIMIT`` instead, reported like any dead letter. A duration
is what ``RetryAfter`` takes (a number of SECONDS) or a duration string (``"250ms"``,
``"5m"``); anything else is ``X_SNOOZE_INVALID`` where the snooze is made.

``job(debounce="10s", debounce_max="2m")``: an enqueue whose idempotency key a job that has
not started yet holds gives that job this input and moves its start to
least(now + debounce, its first enqueue + debounce_max), in one locked update
(``Enqueued.debounced``); a holder that already started answers as a duplicate does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from numbers import Real

from .drivers.records import MAX_DELAY_MS
from .errors import InvalidOption, Terminal, XJobsError
from .options import duration_ms, finite_count

DEFAULT_MAX_SNOOZES = 100


class SnoozeInvalid(InvalidOption):
    """``Snooze(d)`` / ``ctx.snooze(d)`` with a duration that is not one: refused where it is
    made (the attempt then fails as any body error does)."""

    code = "X_SNOOZE_INVALID"


class SnoozeLimit(XJobsError, Terminal):
    """A job snoozed as often as its ``job(max_snoozes=N)`` allows, and once more: it goes dead
    with this error, reported to ``xjobs.on_error`` like any dead letter."""

    code = "X_SNOOZE_LIMIT"


def snooze_ms(duration: object) -> float:
    """A snooze's length in ms: seconds as a number (``RetryAfter``'s unit), a ``timedelta``,
    or a duration string; refused with ``X_SNOOZE_INVALID`` otherwise."""
    if isinstance(duration, timedelta):
        duration = duration.total_seconds()
    if isinstance(duration, Real) and not isinstance(duration, bool):
        ms = float(duration) * 1000.0
        if not math.isfinite(ms) or ms < 0.0 or ms > MAX_DELAY_MS:
            raise SnoozeInvalid("snooze", f"a number of seconds from 0 to ten years, got {duration!r}")
        return ms
    if isinstance(duration, str):
        try:
            return duration_ms(duration, "snooze")
        except InvalidOption as exc:
            raise SnoozeInvalid("snooze", exc.reason) from None
    raise SnoozeInvalid("snooze", f"seconds or a duration such as '5m', got {type(duration).__name__} "
                                  f"{duration!r}")


class Snooze(Exception):
    """Raise (or return, as ``ctx.snooze(d)`` makes it) from a job body: the job runs again
    after ``d`` without spending an attempt or recording an error (module doc)."""

    def __init__(self, duration: object) -> None:
        self.delay_ms = snooze_ms(duration)    # refused here, where the body makes it
        super().__init__(f"snoozed for {self.delay_ms / 1000.0:g}s")


@dataclass(frozen=True, slots=True)
class SnoozePolicy:
    """What ``job()`` declared of snoozes and debounce, checked once at declaration."""

    max_snoozes: int = DEFAULT_MAX_SNOOZES
    debounce_ms: float | None = None
    debounce_max_ms: float | None = None


def declared_policy(max_snoozes: object, debounce: object, debounce_max: object) -> SnoozePolicy:
    """``job(max_snoozes=, debounce=, debounce_max=)`` refused or made a policy. ``debounce_max``
    needs ``debounce`` and is at least it; without one it defaults to ``debounce`` times 10.
    (The idempotency key debounce needs is required of every job: ``job()`` refused it already.)"""
    limit = finite_count(max_snoozes, "max_snoozes", minimum=0, maximum=1_000_000)
    if debounce is None:
        if debounce_max is not None:
            raise InvalidOption("debounce_max", "takes a debounce= as well")
        return SnoozePolicy(limit)
    wait = duration_ms(debounce, "debounce", exclusive_minimum=True)
    most = wait * 10.0 if debounce_max is None else duration_ms(debounce_max, "debounce_max")
    if most < wait:
        raise InvalidOption("debounce_max", "must be at least debounce")
    return SnoozePolicy(limit, wait, min(most, MAX_DELAY_MS))


__all__ = ["DEFAULT_MAX_SNOOZES", "Snooze", "SnoozeInvalid", "SnoozeLimit", "SnoozePolicy", "declared_policy",
           "snooze_ms"]
