"""Cron occurrences, computed in one place: ``CronResolver`` (croniter behind one small seam
that a scheduler or a test can replace).

Expressions are croniter's: five fields, or six with seconds last. Occurrences are computed in
the task's IANA zone, as wall-clock times, and answered as epoch milliseconds. Daylight-saving
changes follow one rule, the one cron users expect:

* a wall-clock time that does not exist (the hour skipped in spring) fires at the first
  instant after the jump (``30 2 * * *`` fires at 03:00 that day);
* a wall-clock time that happens twice (the hour repeated in autumn) fires ONCE, at its first
  instant: croniter alone would fire ``30 2 * * *`` twice that night, and a nightly job must
  not run twice.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Iterator, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import InvalidOption

_ZONE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$")
_SCAN_LIMIT = 100_000   # occurrences one call may walk before it gives up (a bug, not a schedule)


def check_zone(tz: object) -> ZoneInfo:
    """A real IANA zone name (``Europe/Berlin``, ``UTC``): never a fixed offset like
    ``+02:00``, which would silently ignore daylight saving."""
    if not isinstance(tz, str) or not tz:
        raise InvalidOption("tz", "is required: an IANA zone name such as 'Europe/Berlin' or 'UTC'")
    if not _ZONE_NAME.match(tz) or tz.startswith(("+", "-")):
        raise InvalidOption("tz", f"must be an IANA zone name such as 'Europe/Berlin', not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidOption("tz", f"unknown time zone {tz!r}") from None


def check_expression(expr: object) -> str:
    """A croniter expression of five fields, or six with seconds last."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidOption("cron", "must be a cron expression like '0 3 * * *'")
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise InvalidOption("cron", f"must have five fields (or six, seconds last), got {len(fields)}: {expr!r}")
    # croniter (and dateutil under it) is imported by the first task declared or walked, so
    # an app without tasks never carries it, nor does every child forked from its supervisor
    from croniter import croniter
    from croniter.croniter import CroniterError
    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=timezone.utc))
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidOption("cron", f"not a valid expression {expr!r}: {exc}") from None
    return " ".join(fields)


def _ms(moment: datetime) -> float:
    return moment.timestamp() * 1000.0


def _repeated(moment: datetime, zone: ZoneInfo) -> bool:
    """Whether ``moment`` is the SECOND instant of a wall-clock time that happens twice."""
    wall = moment.astimezone(zone).replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return first != second and moment.utcoffset() == second


class CronResolver(Protocol):
    def after(self, expr: str, tz: str, after_ms: float) -> float:
        """The first occurrence strictly after ``after_ms``."""
    def between(self, expr: str, tz: str, after_ms: float, until_ms: float, limit: int) -> list[float]:
        """Occurrences in ``(after_ms, until_ms]``, oldest first, at most ``limit``."""
    def latest(self, expr: str, tz: str, at_ms: float) -> float | None:
        """The last occurrence at or before ``at_ms``."""


class CroniterResolver:
    """The default resolver. ``between`` walks forwards; ``latest`` walks backwards from the
    moment, so a task missed for a year costs one step, not a year of occurrences."""

    def _walk(self, expr: str, tz: str, start_ms: float, forwards: bool) -> Iterator[float]:
        from croniter import croniter
        zone = check_zone(tz)
        start = datetime.fromtimestamp(start_ms / 1000.0, tz=timezone.utc).astimezone(zone)
        it = croniter(expr, start)
        step = it.get_next if forwards else it.get_prev
        for _ in range(_SCAN_LIMIT):
            moment = step(datetime)
            if not _repeated(moment, zone):
                yield _ms(moment)
        raise InvalidOption("cron", f"{expr!r} walked {_SCAN_LIMIT} occurrences without an answer")

    def after(self, expr: str, tz: str, after_ms: float) -> float:
        return next(self._walk(expr, tz, after_ms, forwards=True))

    def between(self, expr: str, tz: str, after_ms: float, until_ms: float, limit: int) -> list[float]:
        out: list[float] = []
        if limit <= 0 or until_ms <= after_ms:
            return out
        for moment in self._walk(expr, tz, after_ms, forwards=True):
            if moment > until_ms or len(out) >= limit:
                break
            out.append(moment)
        return out

    def latest(self, expr: str, tz: str, at_ms: float) -> float | None:
        # croniter's get_prev answers strictly before its start: start a millisecond later so
        # an occurrence exactly at ``at_ms`` counts
        for moment in self._walk(expr, tz, at_ms + 1.0, forwards=False):
            return moment if moment <= at_ms else None
        return None


DEFAULT_RESOLVER = CroniterResolver()


def iso(ms: float, tz: str) -> str:
    return datetime.fromtimestamp(ms / 1000.0, tz=check_zone(tz)).isoformat()

