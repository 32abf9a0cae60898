"""What a ``jsonb`` column does to a payload, so the memory driver hands back the same values.

PostgreSQL parses a ``jsonb`` document on the way in and prints it again on the way out, and
the driver decodes that text with orjson. Three things a caller can see change on the trip:

- numbers become ``numeric``, which keeps the decimal value but not its spelling: a float
  orjson wrote with a positive exponent (``1e+16``: every float of magnitude 1e16 or more)
  has no fractional digits as a numeric, so it is printed as a whole number and decoded as
  an ``int`` (one past 64 bits is decoded as a float again, of the same value);
- ``-0.0`` is ``numeric`` zero and comes back as ``0.0``;
- object keys come back shorter first, then in byte order (the last of duplicate keys wins,
  as it already does when orjson decodes them).

Every other value (other floats, ints, strings, booleans, null, list order) is unchanged.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return (len(raw), raw)


def _float(value: float) -> Any:
    if value == 0.0:
        return 0.0
    text = orjson.dumps(value)
    if b"e+" not in text:
        return value
    # numeric reads the printed digits, not the binary value: 1.2345678901234568e+17 is
    # 123456789012345680, not the double's exact 123456789012345677-odd
    return orjson.loads(b"%d" % int(Decimal(text.decode())))


def _normalised(value: Any) -> Any:
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, dict):
        return {key: _normalised(value[key]) for key in sorted(value, key=_key_order)}
    if isinstance(value, list):
        return [_normalised(item) for item in value]
    return value


def as_stored(payload: bytes) -> bytes:
    """``payload`` (encoded JSON) as a ``jsonb`` column gives it back, encoded again."""
    return orjson.dumps(_normalised(orjson.loads(payload)))
