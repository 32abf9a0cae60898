"""Rate keys: an OPTIONAL driver capability (``driver.rate_keys``), like the backfill ledger.

``job(rate="N/period", rate_key=...)`` allows N starts per key in each window of the period,
across the fleet. Windows are FIXED: ``[k * period, (k + 1) * period)`` from the epoch, on the
database's clock, so every worker counts in the same window whatever its own clock says. One
row per (job, key) holds the window it counts now (``rate_keys``, migration 16); a start in a
later window begins the count again in place.

* ``rate_take(asks)``: starts for claimed jobs of a rate (each fenced on its claim's token).
  Per key the window's room is granted to the first jobs by id; a granted job's
  ``started_at`` is inside the window it counts in (the grant's time, if it was claimed
  before that window opened). Each answer says
  whether it was granted and how long until the window's next opening: the worker sheds a
  refused job to then (no attempt spent), so it is not claimed again before. A take that fills
  a window moves the key's other due ready jobs (``PUSH_MOST`` at most) to the windows they
  can start in, ``cap`` to a window in claim order, so no claim reads past them.
* ``rate_key_wait(job_id)``: what a job's key says of it, for ``jobs show`` (None: the job
  declares no rate).
* ``rate_key_prune(age_ms)``: forget windows that closed more than ``age_ms`` ago.

The claims themselves leave ready any job whose key's current window is full (a filter, not
the grant), so a claim does not take what it would only shed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from ..errors import InvalidOption
from ..options import duration_ms, finite_count, finite_option
from .records import MAX_DELAY_MS
from .refusals import is_bigint

MAX_CAP = 1_000_000
PUSH_MOST = 10_000   # the waiting jobs one take moves at most (a bounded statement)
MAX_PERIOD_MS = 31 * 86_400_000.0


@dataclass(frozen=True, slots=True)
class RateAsk:
    """A start asked for the claimed job ``job_id`` (under claim ``token``): its job allows
    ``cap`` starts per key in each window of ``period_ms``."""

    job_id: int
    token: int
    cap: int
    period_ms: float


@dataclass(frozen=True, slots=True)
class RateGrant:
    """``granted``, or refused until the window's next opening, ``next_ms`` from now."""

    job_id: int
    granted: bool
    next_ms: float


@dataclass(frozen=True, slots=True)
class RateWait:
    """A job's rate key and the window that key counts now (``cap``, ``n``, ``period_ms``
    and ``opens`` None: it has none), read at ``now`` (epoch ms, the driver's clock); ``due``:
    the job's run_at while it is ready (a take that filled the window may have moved it to
    the window it can start in)."""

    key: str
    cap: int | None
    n: int | None
    period_ms: float | None
    opens: float | None
    now: float
    due: float | None = None

    @property
    def until(self) -> float | None:
        """When the job may start: the end of its key's window while that is full, or its own
        later due time (None: it may start now, or it is not ready)."""
        later = self.due if self.due is not None and self.due > self.now else None
        if self.cap is None or self.n is None or self.period_ms is None or self.opens is None:
            return later
        closes = self.opens + self.period_ms
        full = closes if self.n >= self.cap and closes > self.now and self.due is not None else None
        return max((t for t in (full, later) if t is not None), default=None)


@runtime_checkable
class RateKeyStore(Protocol):
    def rate_take(self, asks: Sequence[RateAsk]) -> list[RateGrant]: ...
    def rate_key_wait(self, job_id: int) -> RateWait | None: ...
    def rate_key_prune(self, age_ms: float) -> int: ...


def rate_keys_of(driver: object) -> RateKeyStore | None:
    """The driver's rate-key store, or None: the capability is optional."""
    store = getattr(driver, "rate_keys", None)
    return store if isinstance(store, RateKeyStore) else None


def check_ask(ask: RateAsk) -> RateAsk:
    if not isinstance(ask, RateAsk):
        raise InvalidOption("rate_take", f"takes RateAsk records, got {type(ask).__name__}")
    if not is_bigint(ask.job_id) or not is_bigint(ask.token):
        raise InvalidOption("rate_take", f"job id and token must be bigints, got {ask.job_id!r}, {ask.token!r}")
    return RateAsk(ask.job_id, ask.token, finite_count(ask.cap, "rate.cap", minimum=1, maximum=MAX_CAP),
                   finite_option(ask.period_ms, "rate.period", minimum=1.0, maximum=MAX_PERIOD_MS))


class CheckedRateKeys(RateKeyStore):
    """The door of the rate-key store: every argument refused or normalised once, then the
    driver's own; an empty batch never reaches it."""

    def __init__(self, store: RateKeyStore) -> None:
        self._store = store

    def rate_take(self, asks: Sequence[RateAsk]) -> list[RateGrant]:
        checked = [check_ask(ask) for ask in asks]
        if len({ask.job_id for ask in checked}) != len(checked):
            raise InvalidOption("rate_take", "asks for one job at most once per call")
        return self._store.rate_take(checked) if checked else []

    def rate_key_wait(self, job_id: int) -> RateWait | None:
        return self._store.rate_key_wait(job_id) if is_bigint(job_id) else None

    def rate_key_prune(self, age_ms: float) -> int:
        return self._store.rate_key_prune(duration_ms(age_ms, "rate_key_prune.age", maximum_ms=MAX_DELAY_MS))


__all__ = ["CheckedRateKeys", "RateAsk", "RateGrant", "RateKeyStore", "RateWait", "rate_keys_of"]
