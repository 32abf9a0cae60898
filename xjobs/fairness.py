"""``job(fairness=...)``: the key a job's claims are shared out by, declared and checked once.

``fairness="tenant"`` shares a queue's claims among the tenants that have due work (the
row's ``tenant(input)``); ``fairness=lambda i: i["account"]`` among the keys it answers.
``fair_weights={"acme": 3}`` gives a key more turns (3 to every 1 of a key not named). The
rotation itself is the driver's (``drivers/fair.py``); what is decided here is the key each
row carries, at enqueue, and which queues a worker claims fairly.

A queue claims one way: every job of a fair queue declares fairness (each may have its own key
function), so that no row of it is left without a key and no worker claims it in arrival order.
A second job of the queue that disagrees is refused at its declaration
(``X_JOB_FAIRNESS_MIXED``), as are weights that disagree. Rows that carry no key in a fair
queue (enqueued before fairness was declared, or by older code during a deploy) are claimed
when the queue's keyed work leaves a worker idle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .drivers.fair import check_weights
from .errors import FairnessMixed, InvalidOption, PayloadInvalid

TENANT = "tenant"
MAX_KEY = 1024


@dataclass(frozen=True)
class Fairness:
    """A job's fairness: ``by`` is ``"tenant"`` or the key function; ``weights`` key -> weight."""

    by: str | Callable[[Any], Any]
    weights: Mapping[str, float] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """As the manifest and ``jobs show`` say it: the tenant, or a derived key, and the weights."""
        return {"by": TENANT if self.by == TENANT else "derived", "weights": dict(sorted(self.weights.items()))}


def declare(fairness: object, weights: object, *, has_tenant: bool) -> Fairness | None:
    """``job(fairness=, fair_weights=)`` checked at declaration."""
    if fairness is None:
        if weights is not None:
            raise InvalidOption("fair_weights", "weights share out fair claims: declare fairness= too")
        return None
    if fairness == TENANT:
        if not has_tenant:
            raise InvalidOption("fairness", 'fairness="tenant" needs a tenant; this job declares tenant="none" '
                                            "(give a key function instead)")
    elif isinstance(fairness, str) or not callable(fairness):
        raise InvalidOption("fairness", f'must be "tenant" or a callable taking the input, got {fairness!r}')
    return Fairness(fairness, check_weights({} if weights is None else weights, "fair_weights"))


def key_for(fairness: Fairness, name: str, tenant: str | None, input: Any) -> str:
    """The key a row carries: its tenant, or the key function's answer (a non-empty string)."""
    if fairness.by == TENANT:
        assert tenant is not None   # declare() refused fairness="tenant" without one
        return tenant
    assert callable(fairness.by)
    try:
        key = fairness.by(input)
    except Exception as exc:
        raise PayloadInvalid(f"job {name!r}: fairness(input) raised {type(exc).__name__}: {exc}") from exc
    if isinstance(key, bool) or not isinstance(key, (str, int)) or key == "":
        raise PayloadInvalid(f"job {name!r}: fairness(input) must answer a non-empty string, got {key!r}")
    key = str(key)
    if "\x00" in key or len(key) > MAX_KEY:
        raise PayloadInvalid(f"job {name!r}: a fairness key is at most {MAX_KEY} characters without NUL")
    return key


@dataclass(frozen=True)
class Declared:
    """What one job of a queue declares, for the check against the others of its queue."""

    name: str
    queue: str
    fairness: Fairness | None


def check_queue(new: Declared, others: Iterable[Declared]) -> None:
    """Refuse a job whose queue already claims the other way, or weighs a key otherwise."""
    for other in others:
        if other.queue != new.queue or other.name == new.name:
            continue
        if (other.fairness is None) != (new.fairness is None):
            fair, plain = (new, other) if new.fairness is not None else (other, new)
            raise FairnessMixed(f"queue {new.queue!r}: job {fair.name!r} declares fairness and job {plain.name!r} "
                                "does not; a queue claims one way (put one of them in another queue)")
        if new.fairness is not None and other.fairness is not None:
            for key, weight in new.fairness.weights.items():
                theirs = other.fairness.weights.get(key)
                if theirs is not None and theirs != weight:
                    raise FairnessMixed(f"queue {new.queue!r}: jobs {other.name!r} and {new.name!r} weigh key "
                                        f"{key!r} {theirs:g} and {weight:g}; a key has one weight per queue")


def queue_weights(declared: Iterable[Declared]) -> dict[str, dict[str, float]]:
    """Queue -> key -> weight, for the fair queues among ``declared``."""
    weights: dict[str, dict[str, float]] = {}
    for job in declared:
        if job.fairness is not None:
            weights.setdefault(job.queue, {}).update(job.fairness.weights)
    return weights


__all__ = ["TENANT", "Fairness", "Declared", "declare", "key_for", "check_queue", "queue_weights"]
