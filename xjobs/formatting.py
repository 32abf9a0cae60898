"""Values as operators read them, for both surfaces (the command line and the dashboard):
durations (``age``), times (``iso``), and views as plain JSON (``plain``). The last two are
the API's projection (``views.py``), which ``xjobs.get`` answers in too."""

from __future__ import annotations

from .views import iso as iso, plain as plain


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
