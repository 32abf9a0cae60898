"""Job payloads are JSON, encoded once with orjson and checked before anything is written.

Refused with a code, never silently altered: values JSON cannot carry (NaN and infinity,
which orjson would quietly turn into ``null``), non-string keys, NUL characters (which a
``jsonb`` column rejects mid-transaction), dataclasses (whose fields would escape these
checks: pass ``dataclasses.asdict(x)``), and payloads over the configured size limit.
"""

from __future__ import annotations

import math

import orjson

from .errors import PayloadInvalid, PayloadTooLarge, ResultInvalid, ResultTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES = 64 * 1024   # a result is read back whole by every waiter
_MAX_DEPTH = 200
_SCALARS = (int, bool, type(None))


def _check(value: object, depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise PayloadInvalid(f"payload nests deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise PayloadInvalid("payload holds a NUL character, which PostgreSQL jsonb cannot store")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadInvalid(f"payload holds {value!r}, which JSON cannot represent")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                raise PayloadInvalid("payload holds a NUL character in a key")
            if not isinstance(item, _SCALARS):
                _check(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, _SCALARS):
                _check(item, depth + 1)


def _refuse(value: object) -> object:
    raise TypeError(f"type {type(value).__name__} is not JSON-encodable here")


def compact(encoded: bytes) -> bytes:
    """``encoded`` (an ``orjson.dumps`` result) copied into an object of its own size, for one
    that is KEPT: each result of ``orjson.dumps`` holds about 4 KiB of memory behind it, however
    short (100,000 payloads of a few bytes held 400 MiB until copied; the copy is cheaper
    than the allocations it saves)."""
    return bytes(memoryview(encoded))


def _maybe_refused(encoded: bytes) -> bool:
    """Whether ``_check`` could refuse the value ``encoded`` came from. orjson writes NaN and
    infinity as ``null`` and a NUL character as ``\\u0000``, and a value nested deeper than
    ``_MAX_DEPTH`` has that many brackets; bytes without any of them need no walk of the value
    (brackets inside strings only count against it, so the answer errs towards walking)."""
    return (b"null" in encoded or b"\\u0000" in encoded
            or encoded.count(b"[") + encoded.count(b"{") > _MAX_DEPTH)


def encode_payload(value: object, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    try:
        encoded = orjson.dumps(value, default=_refuse, option=orjson.OPT_PASSTHROUGH_DATACLASS)
    except TypeError as exc:  # orjson.JSONEncodeError subclasses TypeError
        _check(value)   # a refusal of ours names the cause better (depth, NUL, NaN)
        raise PayloadInvalid(f"payload is not JSON-encodable: {exc}") from None
    if _maybe_refused(encoded):   # the walk costs more than the encoding: only when it can refuse
        _check(value)
    encoded = compact(encoded)
    if len(encoded) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(encoded)} bytes, over the limit of {max_bytes}")
    return encoded


def encode_result(value: object, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> bytes | None:
    """A body's return value as it is stored with its job: the checks of a payload, with codes
    of its own (the failure is the run's, not an enqueuer's), and None for None (no result)."""
    if value is None:
        return None
    try:
        return encode_payload(value, max_bytes)
    except PayloadInvalid as exc:
        raise ResultInvalid(str(exc.args[0]).replace("payload", "the result", 1)) from None
    except PayloadTooLarge as exc:
        raise ResultTooLarge(str(exc.args[0]).replace("payload", "the result", 1)
                             + " (max_result_bytes)") from None
