"""What a request's query or form says, parsed once for the pages and the ``/api/`` answers:
the jobs filters, a job id, a cursor's start time. Text is trimmed and an empty value is
absent; what cannot be a value is refused here, before any statement runs."""

from __future__ import annotations

import math
from typing import Mapping

from .. import admin
from ..drivers.base import ListFilter
from ..drivers.refusals import is_bigint
from ..errors import InvalidOption

# "group": a dead-letter group's error prefix, matched exactly (the dead letters page links it)
FILTERS = ("queue", "name", "state", "tenant", "since", "until", "error", "group", "parent")


def raw_filters(source: Mapping[str, str]) -> dict[str, str | None]:
    """The filters a request gives: text trimmed, empty ones absent (None); a dead-letter group
    is taken exactly as given, the empty one (jobs that died with no error) included."""
    raw: dict[str, str | None] = {}
    for key in FILTERS:
        value = source.get(key)
        if key == "group" and value is not None:
            value = value.replace("\r\n", "\n")   # a form posts line breaks as CRLF
        elif value is not None:
            value = value.strip() or None
        raw[key] = value
    return raw


def where(raw: dict[str, str | None], limit: int) -> ListFilter:
    """The filters as the driver's listing takes them (times and ages checked by ``admin.when``)."""
    since, since_ago = admin.when(raw["since"], "since")
    until, until_ago = admin.when(raw["until"], "until")
    parent = None if raw["parent"] is None else job_id(raw["parent"])
    if raw["parent"] is not None and parent is None:
        raise InvalidOption("parent", f"must be a job id, got {raw['parent']!r}")
    return ListFilter(queue=raw["queue"], name=raw["name"], state=raw["state"], tenant=raw["tenant"],
                      error=raw["error"], error_group=raw["group"], limit=limit, parent_id=parent,
                      since_ms=since, since_ago_ms=since_ago, until_ms=until, until_ago_ms=until_ago)


def job_id(text: str) -> int | None:
    """A job id from text: ASCII digits only (``str.isdigit`` takes "²"), within a bigint."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        return None
    value = int(text)
    return value if is_bigint(value) else None


def start_time(text: str) -> float | None:
    """A start time from a cursor: a finite number of epoch milliseconds."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
