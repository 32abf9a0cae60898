"""A TCP proxy between the daemons and PostgreSQL that can stall and reset connections.

One thread runs a ``selectors`` loop over every connection pair (client <-> server). Other
threads steer it:

* ``stall()``: nothing is forwarded in either direction (and new connections are accepted but
  not connected through) until ``resume()``: to both peers it looks like a network that went
  silent, with every TCP connection still up and the kernel answering keepalives;
* ``reset()``: every pair is closed with ``SO_LINGER`` 0, which sends a TCP RST to both
  sides: a NAT entry or a load balancer dropping the flows;
* ``close()``: the listener and every pair closed, the thread joined.

While PostgreSQL itself is down the proxy still accepts, and closes the client as soon as the
connection to the server is refused, as a real middlebox would.
"""

from __future__ import annotations

import collections
import selectors
import socket
import struct
import threading
from typing import Callable

_CHUNK = 65536
_HIGH_WATER = 1 << 20      # stop reading a side while this much is queued for the other


class _Pair:
    __slots__ = ("client", "server", "to_server", "to_client", "connected")

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.to_server = bytearray()
        self.to_client = bytearray()
        self.connected = False


class Proxy:
    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(listen, backlog=512)
        self._listener.setblocking(False)
        self.address = self._listener.getsockname()
        self.port = self.address[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._commands: collections.deque[Callable[[], None]] = collections.deque()
        self._sel = selectors.DefaultSelector()
        self._pairs: list[_Pair] = []
        self._stalled = False
        self._stop = False
        self.accepted = 0
        self.resets = 0
        self._thread = threading.Thread(target=self._loop, name="faults-proxy", daemon=True)

    # -- steering (any thread) -----------------------------------------------------------------------

    def start(self) -> "Proxy":
        self._thread.start()
        return self

    def _call(self, fn: Callable[[], None]) -> None:
        done = threading.Event()

        def command() -> None:
            try:
                fn()
            finally:
                done.set()
        self._commands.append(command)
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError("the proxy's loop did not answer within 10 s")

    def stall(self) -> None:
        self._call(lambda: setattr(self, "_stalled", True))

    def resume(self) -> None:
        self._call(lambda: setattr(self, "_stalled", False))

    def reset(self) -> int:
        """RST every connection through the proxy; answers how many pairs were reset."""
        count = [0]

        def reset_all() -> None:
            count[0] = len(self._pairs)
            for pair in list(self._pairs):
                self._drop(pair, rst=True)
            self.resets += count[0]
        self._call(reset_all)
        return count[0]

    def connections(self) -> int:
        return len(self._pairs)

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop = True
            self._wake_w.send(b"x")
            self._thread.join(10)
        for pair in list(self._pairs):
            self._drop(pair, rst=False)
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the loop (its own thread) -------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop:
            self._register()
            for key, events in self._sel.select(timeout=1.0):
                what = key.data
                if what == "wake":
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                elif what == "listen":
                    self._accept()
                else:
                    pair, sock = what
                    if pair in self._pairs:
                        self._service(pair, sock, events)
            while self._commands:
                self._commands.popleft()()
        self._sel.close()

    def _register(self) -> None:
        """Rebuild the selector's interest set from the pairs' state (simple and cheap at the
        few hundred connections a battery holds)."""
        for key in list(self._sel.get_map().values()):
            self._sel.unregister(key.fileobj)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._sel.register(self._listener, selectors.EVENT_READ, "listen")
        if self._stalled:
            return
        for pair in list(self._pairs):
            if not pair.connected:
                if not self._connect(pair):
                    continue
            assert pair.server is not None
            for sock, inbound, outbound in ((pair.client, pair.to_server, pair.to_client),
                                            (pair.server, pair.to_client, pair.to_server)):
                mask = 0
                if len(inbound) < _HIGH_WATER:
                    mask |= selectors.EVENT_READ
                if outbound:
                    mask |= selectors.EVENT_WRITE
                if mask:
                    self._sel.register(sock, mask, (pair, sock))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pairs.append(_Pair(client))
            self.accepted += 1

    def _connect(self, pair: _Pair) -> bool:
        try:
            server = socket.create_connection(self.upstream, timeout=2.0)
        except OSError:
            self._drop(pair, rst=False)     # the server is down: the client sees it closed
            return False
        server.setblocking(False)
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair.server, pair.connected = server, True
        return True

    def _service(self, pair: _Pair, sock: socket.socket, events: int) -> None:
        outbound = pair.to_client if sock is pair.client else pair.to_server
        inbound = pair.to_server if sock is pair.client else pair.to_client
        try:
            if events & selectors.EVENT_WRITE and outbound:
                sent = sock.send(outbound)
                del outbound[:sent]
            if events & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if not data:    # one side closed: pass on what it said last, then close both
                    other = pair.server if sock is pair.client else pair.client
                    if inbound and other is not None:
                        try:
                            other.send(inbound)
                        except OSError:
                            pass
                    self._drop(pair, rst=False)
                    return
                inbound.extend(data)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pair, rst=True)

    def _drop(self, pair: _Pair, *, rst: bool) -> None:
        if pair in self._pairs:
            self._pairs.remove(pair)
        for sock in (pair.client, pair.server):
            if sock is None:
                continue
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            if rst:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            sock.close()
