"""``encode_payload`` walks a value only when its encoding could hide a refusal (``null`` for
NaN and infinity, ``\\u0000`` for NUL, deep brackets): it refuses exactly what the full walk
refuses, with the same code, for any JSON-like value."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xjobs.errors import PayloadInvalid
from xjobs.payload import _check, encode_payload

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=8) | st.sampled_from(["\x00", "a\x00b", "\\u0000"])
_leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats() | _text
_value = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                      max_leaves=20)


def _walked(value: object) -> bytes | str:
    """What the always-walking encoder answered: the bytes, or the refusal's message."""
    try:
        _check(value)
    except PayloadInvalid as exc:
        return str(exc)
    return orjson.dumps(value)


@settings(max_examples=400, deadline=None)
@given(_value)
def test_the_fast_path_refuses_exactly_what_the_walk_refuses(value):
    expected = _walked(value)
    try:
        got: bytes | str = encode_payload(value)
    except PayloadInvalid as exc:
        got = str(exc)
    assert got == expected


@pytest.mark.parametrize("value", [math.nan, [1, {"x": math.inf}], {"k\x00": 1}, ["\x00"]])
def test_each_hidden_refusal_is_still_found(value):
    with pytest.raises(PayloadInvalid) as info:
        encode_payload(value)
    assert info.value.code == "X_PAYLOAD_INVALID"


def test_nesting_past_the_limit_is_refused_though_orjson_would_encode_it():
    value: list[object] = []
    for _ in range(230):
        value = [value]
    with pytest.raises(PayloadInvalid, match="nests deeper"):
        encode_payload(value)
