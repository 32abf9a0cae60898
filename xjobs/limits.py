"""The per-process ceilings a worker process applies (``[xjobs.limits]``, ``XJOBS_LIMITS``): a
setting, checked when it is built; the gate that applies them is ``workers/limiter.py``.

Ceilings, each for ONE worker process: jobs in flight in all (``global``), per queue
(``queue``), per tenant (``tenant``), and job starts per tenant within a sliding window
(``tenant_rate`` per ``tenant_rate_window``), with at most ``max_tenants`` tenants tracked for
the window. Every number is finite and at least 0; 0 is a hard stop, an omitted ceiling is
unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InvalidOption
from .options import duration_ms, finite_count

_COUNT_MAX = 1_000_000


@dataclass(frozen=True)
class Limits:
    global_: int | None = None
    queue: int | None = None
    tenant: int | None = None
    tenant_rate: int | None = None
    tenant_rate_window_ms: float = 1_000.0
    max_tenants: int = 10_000

    def __post_init__(self) -> None:
        for name, option in (("global_", "limits.global"), ("queue", "limits.queue"),
                             ("tenant", "limits.tenant"), ("tenant_rate", "limits.tenant_rate")):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, finite_count(value, option, minimum=0, maximum=_COUNT_MAX))
        object.__setattr__(self, "tenant_rate_window_ms", duration_ms(
            self.tenant_rate_window_ms, "limits.tenant_rate_window", exclusive_minimum=True))
        object.__setattr__(self, "max_tenants", finite_count(self.max_tenants, "limits.max_tenants",
                                                             minimum=1, maximum=_COUNT_MAX))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "Limits":
        """From ``[xjobs.limits]`` / flags: ``global``, ``queue``, ``tenant``, ``tenant_rate``,
        ``tenant_rate_window`` (a duration), ``max_tenants``."""
        known = {"global": "global_", "queue": "queue", "tenant": "tenant", "tenant_rate": "tenant_rate",
                 "tenant_rate_window": "tenant_rate_window_ms", "max_tenants": "max_tenants"}
        unknown = set(values) - set(known)
        if unknown:
            raise InvalidOption("limits", f"unknown limit(s): {', '.join(sorted(unknown))}; "
                                          f"known: {', '.join(known)}")
        return cls(**{known[k]: v for k, v in values.items()})

    @property
    def unlimited(self) -> bool:
        return self.global_ is None and self.queue is None and self.tenant is None and self.tenant_rate is None
