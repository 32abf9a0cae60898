"""Values as operators read them, for both surfaces (the command line and the dashboard):
durations (``age``), times (``iso``), and views as plain JSON (``plain``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

_TIME_FIELDS = ("run_at", "created_at", "finished_at", "lease_expires_at", "at", "started_at",
                "wake_at", "until")


def age(seconds: float | None) -> str:
    """A duration as people read it: ``4.2s``, ``3m05s``, ``2h10m``, ``1d03h``."""
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"


def iso(ms: float | None) -> str | None:
    """Epoch milliseconds as ISO-8601 in UTC, to the millisecond."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat(timespec="milliseconds")


def plain(value: Any) -> Any:
    """A JobView (or anything holding them) as plain JSON with ISO-8601 times."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        # a payload is the application's data, shown exactly as stored
        return {k: (v if k == "payload" else
                    iso(v) if k in _TIME_FIELDS and isinstance(v, (int, float)) else plain(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
