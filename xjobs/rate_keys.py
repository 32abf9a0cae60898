"""``job(rate="100/1m", rate_key=lambda i: i["api_key"])``: fleet-wide rate limits by key.

A job that declares ``rate`` starts at most N runs per key in each window of the period,
across every worker of the fleet, counted in the database (``drivers/rate_keys.py``). The key
is what ``rate_key(input)`` answers at enqueue, kept on the row; without ``rate_key`` every
run of the job shares one key, the job's name (keys are counted per job: two jobs keyed by
the same value have a window each). ``rate_key`` without ``rate`` is refused.

What is refused, and when:

* at declaration (``X_INVALID_OPTION``, option ``rate`` or ``rate_key``): a rate that is not
  ``"N/period"`` with N a whole number from 1 to 1,000,000 and a period from 1 ms to 31 days
  (``"50/1s"``, ``"100/1m"``, ``"10/250ms"``; a bare unit is one of it, ``"5/s"``), NaN,
  negative and zero; a ``rate_key`` that is not callable;
* at enqueue (``X_JOB_RATE_KEY_INVALID``, nothing written): a key that is not a non-empty
  string or an integer (bools are refused), longer than 1,024 characters or holding NUL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .drivers.rate_keys import rate_keys_of
from .errors import InvalidOption, XJobsError
from .options import duration_ms, finite_count

MAX_RATE = 1_000_000
MAX_PERIOD_MS = 31 * 86_400_000.0
_MAX_KEY = 1024
_RATE = re.compile(r"^\s*([^/\s]+)\s*/\s*(\S+)\s*$")
_BARE_UNIT = re.compile(r"^(ms|s|m|h|d)$")


class RateKeyInvalid(XJobsError):
    """``rate_key(input)`` answered no usable key; nothing of the call is written."""

    code = "X_JOB_RATE_KEY_INVALID"


class RateUnenforceable(XJobsError):
    """A job declares ``rate`` and the worker's driver has no rate-key store to count it in."""

    code = "X_JOB_RATE_UNENFORCEABLE"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A declared rate: ``cap`` starts per key in each window of ``period_ms``; ``key`` maps an
    input to its key (None: one key for the job)."""

    cap: int
    period_ms: float
    text: str
    key: Callable[[Any], Any] | None = None

    def describe(self) -> dict[str, Any]:
        """The manifest's view: the rate as declared, and whether the key is derived."""
        return {"cap": self.cap, "period_ms": self.period_ms, "text": self.text,
                "key": "derived" if self.key is not None else "job"}


def parse_rate(value: object) -> tuple[int, float, str]:
    """``"N/period"`` as (N, period in ms, the text as given, stripped), or ``InvalidOption("rate")``."""
    if not isinstance(value, str):
        raise InvalidOption("rate", f"must be a string like \"100/1m\", got {value!r}")
    match = _RATE.match(value)
    if match is None:
        raise InvalidOption("rate", f"must be \"N/period\" like \"100/1m\" or \"50/1s\", got {value!r}")
    count_text, period_text = match.groups()
    if not (count_text.isascii() and count_text.isdigit()):   # NaN, inf, signs, fractions: all refused here
        raise InvalidOption("rate", f"the count must be a whole number from 1 to {MAX_RATE}, got {count_text!r}")
    cap = finite_count(int(count_text), "rate", minimum=1, maximum=MAX_RATE)
    if _BARE_UNIT.match(period_text):
        period_text = "1" + period_text
    if period_text.strip().startswith("-"):
        raise InvalidOption("rate", f"the period must be positive, got {period_text!r}")
    try:
        period = duration_ms(period_text, "rate", exclusive_minimum=True, maximum_ms=MAX_PERIOD_MS)
    except InvalidOption as exc:
        raise InvalidOption("rate", f"the period {period_text!r} must be a duration from 1ms to 31d "
                                    f"(250ms, 1s, 1m, 1h, 1d): {exc.reason}") from None
    if period < 1.0:
        raise InvalidOption("rate", f"the period must be at least 1ms, got {period_text!r}")
    return cap, period, value.strip()


def declared_rate(rate: object, rate_key: object) -> RateLimit | None:
    """What ``job(rate=, rate_key=)`` declares, checked; None when neither is given."""
    if rate is None:
        if rate_key is not None:
            raise InvalidOption("rate_key", "is given without rate: declare rate=\"N/period\" too")
        return None
    cap, period, text = parse_rate(rate)
    if rate_key is not None and not callable(rate_key):
        raise InvalidOption("rate_key", "must be a callable taking the input and returning its key")
    return RateLimit(cap, period, text, rate_key)


def rate_key_for(job: str, limit: RateLimit | None, input: Any) -> str | None:
    """The key ``input`` is counted under (None: the job declares no rate); a bad key is
    ``X_JOB_RATE_KEY_INVALID``."""
    if limit is None:
        return None
    if limit.key is None:
        return job    # one key for the job: its name
    try:
        key = limit.key(input)
    except Exception as exc:
        raise RateKeyInvalid(f"job {job!r}: rate_key(input) raised {type(exc).__name__}: {exc}") from exc
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key:
        raise RateKeyInvalid(f"job {job!r}: rate_key must return a non-empty string or an integer, got {key!r}")
    if len(key) > _MAX_KEY or "\x00" in key:
        raise RateKeyInvalid(f"job {job!r}: a rate key is at most {_MAX_KEY} characters without NUL")
    return key


def rate_waiting(driver: object, job_id: int) -> dict[str, Any] | None:
    """What ``jobs show`` says of a job's rate key: the key, the window it counts now
    (``cap`` starts per ``period_ms``, ``started`` of them since ``window_opened``, epoch ms)
    and ``waiting_until``: when a ready job may start, held back by that full window or moved
    to a later one (None: it may start now, or it is not ready). None: the job declares no
    rate, or the driver keeps no rate keys."""
    store = rate_keys_of(driver)
    wait = None if store is None else store.rate_key_wait(job_id)
    if wait is None:
        return None
    return {"key": wait.key, "cap": wait.cap, "period_ms": wait.period_ms, "started": wait.n,
            "window_opened": wait.opens, "waiting_until": wait.until}


__all__ = ["MAX_RATE", "RateKeyInvalid", "RateLimit", "RateUnenforceable", "declared_rate", "parse_rate",
           "rate_key_for", "rate_waiting"]
