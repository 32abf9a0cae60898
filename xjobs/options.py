"""The two refusals every numeric knob passes through, and duration and address parsing.

``NaN`` compares false with everything, so a knob guarded only by ``x < 0`` lets it through
and it surfaces far away: a lease that never expires, a claim of ``NaN`` rows, a poll loop
that spins. Every number a user can set is therefore read through ``finite_option`` (a bound)
or ``finite_count`` (a whole number of things) and refused at construction with
``X_INVALID_OPTION`` naming the option.
"""

from __future__ import annotations

import math
import re
import socket
from numbers import Integral, Real

from .errors import InvalidOption

_UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_PLAIN_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")


def finite_option(value: object, option: str, *, minimum: float = 0.0,
                  maximum: float = math.inf, exclusive_minimum: bool = False) -> float:
    """A finite real number in ``[minimum, maximum]`` (or ``(minimum, ...]``)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidOption(option, f"must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidOption(option, f"must be finite, got {value!r}")
    if number < minimum or (exclusive_minimum and number == minimum):
        bound = "greater than" if exclusive_minimum else "at least"
        raise InvalidOption(option, f"must be {bound} {minimum:g}, got {value!r}")
    if number > maximum:
        raise InvalidOption(option, f"must be at most {maximum:g}, got {value!r}")
    return number


def finite_count(value: object, option: str, *, minimum: int = 0,
                 maximum: int = 2**31 - 1) -> int:
    """A whole number of things: ``2.5`` workers or ``True`` rows are refused, not rounded."""
    if isinstance(value, bool) or not isinstance(value, (Integral, float)):
        raise InvalidOption(option, f"must be a whole number, got {type(value).__name__} {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidOption(option, f"must be finite, got {value!r}")
        if not value.is_integer():
            raise InvalidOption(option, f"must be a whole number, got {value!r}")
    count = int(value)
    if count < minimum:
        raise InvalidOption(option, f"must be at least {minimum}, got {value!r}")
    if count > maximum:
        raise InvalidOption(option, f"must be at most {maximum}, got {value!r}")
    return count


def duration_ms(value: object, option: str, *, minimum_ms: float = 0.0,
                maximum_ms: float = 10 * 365 * 86_400_000.0,
                exclusive_minimum: bool = False) -> float:
    """``"250ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"`` or a number of milliseconds."""
    if isinstance(value, str):
        unsigned = value.strip().removeprefix("-")
        if unsigned != value.strip() and (_DURATION.match(unsigned) or _PLAIN_NUMBER.match(unsigned)):
            raise InvalidOption(option, f"negative durations are refused, got {value!r}")
        match = _DURATION.match(value)
        if match is None and _PLAIN_NUMBER.match(value):
            match = _DURATION.match(value.strip() + "ms")   # a bare number is milliseconds
        if match is None:
            raise InvalidOption(option, f"not a duration: {value!r} (use 250ms, 5s, 2m, 1h or a number of ms)")
        value = float(match.group(1)) * _UNITS_MS[match.group(2)]
    elif isinstance(value, Real) and not isinstance(value, bool) and value < 0:
        raise InvalidOption(option, f"negative durations are refused, got {value!r}")
    return finite_option(value, option, minimum=minimum_ms, maximum=maximum_ms,
                         exclusive_minimum=exclusive_minimum)


def duration_text(ms: float) -> str:
    """A duration as ``duration_ms`` reads it back: the largest whole unit (``"90s"``, ``"2h"``),
    else milliseconds."""
    for suffix, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms / size:g}{suffix}"
    return f"{ms:g}ms"


_NAME_MAX = 128


def plain_name(value: object, option: str) -> str:
    """A queue or job name: any printable text is data (``constructor``, quotes, ``--``), but
    it must be a non-empty string without control characters and of bounded length."""
    if not isinstance(value, str):
        raise InvalidOption(option, f"must be a string, got {type(value).__name__}")
    if not value or value.strip() != value:
        raise InvalidOption(option, f"must be non-empty without surrounding spaces, got {value!r}")
    if len(value) > _NAME_MAX:
        raise InvalidOption(option, f"must be at most {_NAME_MAX} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidOption(option, f"must not contain control characters, got {value!r}")
    return value


def parse_address(address: str, option: str = "metrics") -> tuple[str, int]:
    """A listening address, ``HOST:PORT`` (``--metrics``, ``--ui``), whose host resolves;
    ``InvalidOption(option)`` otherwise. An empty host is 127.0.0.1, a bracketed one IPv6."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise InvalidOption(option, f"expected HOST:PORT like 127.0.0.1:9464, got {address!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise InvalidOption(option, f"port must be 0..65535, got {port}")
    host = host.strip("[]") or "127.0.0.1"
    try:
        socket.getaddrinfo(host, port)
    except socket.gaierror as exc:
        raise InvalidOption(option, f"cannot resolve {host!r}: {exc}") from None
    return host, port
