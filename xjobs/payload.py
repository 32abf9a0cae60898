"""Job payloads are JSON, encoded once with orjson and checked before anything is written.

Refused with a code, never silently altered: values JSON cannot carry (NaN and infinity,
which orjson would quietly turn into ``null``), non-string keys, NUL characters (which a
``jsonb`` column rejects mid-transaction), and payloads over the configured size limit.
"""

from __future__ import annotations

import math

import orjson

from .errors import PayloadInvalid, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


def _reject_non_finite(value: object, depth: int = 0) -> None:
    if depth > 200:
        raise PayloadInvalid("payload nests deeper than 200 levels")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadInvalid(f"payload holds {value!r}, which JSON cannot represent")
    elif isinstance(value, dict):
        for item in value.values():
            if not isinstance(item, (str, int, bool)) and item is not None:
                _reject_non_finite(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, (str, int, bool)) and item is not None:
                _reject_non_finite(item, depth + 1)


def encode_payload(value: object, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    _reject_non_finite(value)
    try:
        encoded = orjson.dumps(value)
    except TypeError as exc:  # orjson.JSONEncodeError subclasses TypeError
        raise PayloadInvalid(f"payload is not JSON-encodable: {exc}") from None
    if b"\\u0000" in encoded:
        raise PayloadInvalid("payload holds a NUL character, which PostgreSQL jsonb cannot store")
    if len(encoded) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(encoded)} bytes, over the limit of {max_bytes}")
    return encoded


def decode_payload(data: bytes | str) -> object:
    return orjson.loads(data)
