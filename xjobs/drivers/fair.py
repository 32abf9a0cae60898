"""Fair claims: an OPTIONAL driver capability (``driver.fair``), like the fan-ins.

A fair queue's rows carry a key (``job(fairness=...)``: the tenant, or what a key function
answers), and a claim shares the worker's free slots among the keys that have due work
instead of taking the queue's oldest rows first. The rotation is a stride schedule: each key
has a *pass*, the virtual time of its next turn; a claim takes, of the keys with the lowest
passes, the jobs that would start earliest (a key's k-th job at ``pass + (k - 1) / weight``),
and moves each served key on by what it got over its weight. So over any stretch of claims a
key of weight 2 gets twice the turns of a key of weight 1, and a key that just got work joins
at the queue's lowest pass: it is served next, not after the backlog of the others.

What keeps it cheap however many keys there are: the keys that may have ready work are a
table of their own, kept by the statements that make a row ready (the migration's trigger),
and a claim reads the ``limit + FAIR_SPARE_TURNS`` lowest passes and the head of each of those
keys' lines (an index per key), never the backlog behind them.

* ``job_claim_fair(FairClaim)``: as ``job_claim`` answers, from one queue. A key whose turn
  found nothing due (its ready rows are later, or suspects of a crash, or of names this
  worker lacks) goes behind every key of that turn; one that has no ready row left is
  removed from the rotation (at once in memory; in Postgres by the claimer, unless a
  transaction still making work ready for a key of its lock bucket is open, when it is
  passed over again next turn).
* ``fair_turns(queue, limit)``: the rotation as it stands, lowest pass first.
* ``fair_place(job_id)``: where a due ready job of a fair queue stands (``FairPlace``), for
  ``jobs show``: the keys before its key in the rotation, and its key's due jobs before it.
  None for a job that is not ready and due, carries no key, or is a suspect of a crash (those
  are claimed alone, not in turns). Read for one job at a time: two index reads, the one
  ahead in its key's line bounded by ``FAIR_AHEAD_MOST``.

A fair claim takes no per-job caps or per-process tenant limits (``Claim.caps``,
``Claim.tenants``): what is claimed past them is shed by the worker's admission, as for any
claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping, Protocol, runtime_checkable

from ..errors import InvalidOption
from ..options import finite_count
from .records import ClaimedJob
from .refusals import MAX_ROWS, check_job_names, check_lease, is_bigint

# keys read beyond a claim's limit: a turn that finds a few keys with nothing due still fills
FAIR_SPARE_TURNS = 4
MAX_WEIGHT = 1_000_000.0
# the most of its own key's jobs fair_place counts ahead of a job: a key's backlog is read no further
FAIR_AHEAD_MOST = 10_000


@dataclass(frozen=True, slots=True)
class FairClaim:
    """``job_claim_fair``: up to ``limit`` due ready jobs of ``queue``, shared out among its
    keys in turn, leased to ``identity`` for ``lease_ms``. ``weights``: key -> weight (a key
    not named weighs 1); ``names`` as ``Claim.names``."""

    queue: str
    limit: int
    lease_ms: float
    identity: str
    weights: Mapping[str, float] | None = None
    names: Collection[str] | None = None

    @property
    def turns(self) -> int:
        """How many keys one claim reads."""
        return self.limit + FAIR_SPARE_TURNS


@dataclass(frozen=True, slots=True)
class FairPlace:
    """Where a due ready job of a fair queue stands: ``key``, its fair key; ``ahead``, the due
    ready jobs of that key a claim takes before it (priority, run_at, id; at most
    ``FAIR_AHEAD_MOST``); ``keys_ahead``, the keys before its key in the rotation (lower pass,
    ties by key; None: its key is not in the rotation at this moment); ``keys``, the keys in the
    queue's rotation, its own among them."""

    key: str
    ahead: int
    keys_ahead: int | None
    keys: int


def check_weight(weight: object, option: str) -> float:
    """A weight: a finite number above 0, at most ``MAX_WEIGHT``."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
            or not 0 < weight <= MAX_WEIGHT:
        raise InvalidOption(option, f"must be a number above 0 and at most {MAX_WEIGHT:g}, got {weight!r}")
    return float(weight)


def check_weights(weights: object, option: str) -> dict[str, float]:
    """Key -> weight, each key a non-empty string without NUL."""
    if not isinstance(weights, Mapping):
        raise InvalidOption(option, f"must be a mapping of key to weight, got {type(weights).__name__}")
    if len(weights) > MAX_ROWS:
        raise InvalidOption(option, f"at most {MAX_ROWS} keys")
    checked = {}
    for key, weight in weights.items():
        if not isinstance(key, str) or not key or "\x00" in key:
            raise InvalidOption(option, f"keys must be non-empty strings without NUL, got {key!r}")
        checked[key] = check_weight(weight, f"{option}[{key!r}]")
    return checked


def check_fair_claim(claim: FairClaim) -> FairClaim:
    if not isinstance(claim.queue, str) or not claim.queue:
        raise InvalidOption("claim.queue", "a fair claim needs one queue name")
    return FairClaim(claim.queue, finite_count(claim.limit, "claim.limit", minimum=0, maximum=MAX_ROWS),
                     check_lease(claim.lease_ms, "claim.lease"), claim.identity,
                     check_weights(claim.weights or {}, "claim.weights"), check_job_names(claim.names))


@runtime_checkable
class FairClaims(Protocol):
    def job_claim_fair(self, claim: FairClaim) -> list[ClaimedJob]: ...
    def fair_turns(self, queue: str, limit: int = 100) -> list[tuple[str, float]]: ...
    def fair_place(self, job_id: int) -> FairPlace | None: ...


class CheckedFair(FairClaims):
    """The capability's door: each verb's arguments checked once, then the driver's verb."""

    def __init__(self, inner: FairClaims) -> None:
        self._inner = inner

    def job_claim_fair(self, claim: FairClaim) -> list[ClaimedJob]:
        claim = check_fair_claim(claim)
        if not claim.limit or claim.names == frozenset():
            return []
        return self._inner.job_claim_fair(claim)

    def fair_turns(self, queue: str, limit: int = 100) -> list[tuple[str, float]]:
        return self._inner.fair_turns(queue, finite_count(limit, "limit", minimum=1, maximum=MAX_ROWS))

    def fair_place(self, job_id: int) -> FairPlace | None:
        return self._inner.fair_place(job_id) if is_bigint(job_id) else None


def fair_of(driver: object) -> FairClaims | None:
    """The driver's fair claims, or None for a driver without them."""
    found = getattr(driver, "fair", None)
    return found if isinstance(found, FairClaims) else None


__all__ = ["FAIR_AHEAD_MOST", "FAIR_SPARE_TURNS", "FairClaim", "FairPlace", "FairClaims", "CheckedFair", "check_weight", "check_weights",
           "check_fair_claim", "fair_of"]
