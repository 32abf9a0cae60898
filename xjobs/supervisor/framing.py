"""Length-framed orjson messages over one duplex socket per child.

A frame is a 4-byte big-endian length followed by that many bytes of JSON (an object with a
``type`` field). Child to parent: ``hello``, ``ready``, ``heartbeat`` (with stats),
``lease-lost``, ``draining``, ``stopped``. Parent to child: ``accept`` and ``close`` (both
with ``deadline_at``, a ``time.monotonic()`` reading in ms: CLOCK_MONOTONIC is one clock for
every process on the machine) and ``ping``.

``Channel`` wraps a NON-blocking socket for both ends: ``send`` queues and flushes what the
kernel takes, ``wants_write`` says when the owner's selector should wait for writability,
and ``receive`` answers every complete message that has arrived (``EOFError`` when the other
end is gone). Nothing here blocks, so one slow peer never stalls a loop.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import orjson

HEADER = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024   # a heartbeat with per-job histograms stays far below this


class FrameError(Exception):
    """The peer sent something that is not a frame: the channel is unusable."""


def encode(message: dict[str, Any]) -> bytes:
    body = orjson.dumps(message)
    if len(body) > MAX_FRAME:
        raise FrameError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    return HEADER.pack(len(body)) + body


class Decoder:
    """Accumulates bytes and answers the complete messages among them, in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages: list[dict[str, Any]] = []
        buffer = self._buffer
        offset = 0
        while len(buffer) - offset >= HEADER.size:
            (length,) = HEADER.unpack_from(buffer, offset)
            if length > MAX_FRAME:
                raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME}-byte limit")
            end = offset + HEADER.size + length
            if len(buffer) < end:
                break
            try:
                message = orjson.loads(bytes(buffer[offset + HEADER.size:end]))
            except orjson.JSONDecodeError as exc:
                raise FrameError(f"frame is not JSON: {exc}") from None
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                raise FrameError("frame is not an object with a string 'type'")
            messages.append(message)
            offset = end
        if offset:
            del buffer[:offset]
        return messages

    @property
    def pending(self) -> int:
        return len(self._buffer)


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._decoder = Decoder()
        self._out = bytearray()
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any]) -> bool:
        """Queue one message and push what the socket takes now; False if the peer is gone."""
        if self.closed:
            return False
        self._out += encode(message)
        return self.flush()

    def flush(self) -> bool:
        while self._out:
            try:
                sent = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                self._out.clear()
                return False
            del self._out[:sent]
        return True

    @property
    def wants_write(self) -> bool:
        return bool(self._out)

    @property
    def backlog(self) -> int:
        return len(self._out)

    def receive(self) -> list[dict[str, Any]]:
        """Every complete message readable now; ``EOFError`` once the peer has closed."""
        messages: list[dict[str, Any]] = []
        while True:
            try:
                data = self.sock.recv(256 * 1024)
            except (BlockingIOError, InterruptedError):
                return messages
            except ConnectionError:
                data = b""
            if not data:
                if messages:   # hand over what arrived first; the next call sees the EOF
                    return messages
                raise EOFError("peer closed the channel")
            messages.extend(self._decoder.feed(data))

    def flush_blocking(self, timeout_s: float) -> bool:
        """Best effort before exit: wait up to ``timeout_s`` for the queue to drain."""
        import selectors
        import time
        end = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_WRITE)
            while self._out:
                left = end - time.monotonic()
                if left <= 0 or not self.flush():
                    break
                if self._out:
                    sel.select(left)
        return not self._out

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def pair() -> tuple[socket.socket, socket.socket]:
    """A connected (parent end, child end) pair of Unix stream sockets."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
