"""The pipe protocol: length-framed orjson, whatever the chunking, and refusals of non-frames."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from xjobs.supervisor.framing import MAX_FRAME, Channel, Decoder, FrameError, encode, pair

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
messages = st.builds(lambda kind, body: {"type": kind, **body},
                     st.sampled_from(["hello", "ready", "heartbeat", "lease-lost", "draining", "stopped",
                                      "accept", "close", "ping"]),
                     st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "type"),
                                     json_values, max_size=4))


@given(st.lists(messages, max_size=8), st.lists(st.integers(1, 64), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_any_sequence_survives_any_chunking(batch, cuts):
    stream = b"".join(encode(m) for m in batch)
    decoder = Decoder()
    out, offset, i = [], 0, 0
    while offset < len(stream):
        size = cuts[i % len(cuts)]
        out.extend(decoder.feed(stream[offset:offset + size]))
        offset += size
        i += 1
    assert out == [orjson.loads(orjson.dumps(m)) for m in batch]
    assert decoder.pending == 0


def test_refuses_oversized_and_malformed_frames():
    with pytest.raises(FrameError):
        Decoder().feed(struct.pack(">I", MAX_FRAME + 1))
    with pytest.raises(FrameError):
        Decoder().feed(struct.pack(">I", 3) + b"{{{")
    with pytest.raises(FrameError):
        Decoder().feed(struct.pack(">I", 2) + b"[]")
    with pytest.raises(FrameError):
        Decoder().feed(struct.pack(">I", 12) + b'{"type": 1 }')
    with pytest.raises(FrameError):
        encode({"type": "heartbeat", "blob": "x" * (MAX_FRAME + 1)})


def test_a_channel_delivers_everything_then_reports_eof():
    a, b = pair()
    left, right = Channel(a), Channel(b)
    sent = [{"type": "heartbeat", "n": n, "pad": "x" * 5000} for n in range(200)]   # > a socket buffer
    got: list[dict] = []
    for message in sent:
        left.send(message)
        got.extend(right.receive())
    while left.wants_write:
        left.flush()
        got.extend(right.receive())
    left.close()
    import select
    while True:
        select.select([right.sock], [], [], 1.0)
        try:
            got.extend(right.receive())
        except EOFError:
            break
    assert got == sent
