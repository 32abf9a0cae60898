"""A webhook receiver on 127.0.0.1 for the tests: ``http.server`` in a thread, answering each
path as told and keeping every request it was sent (method, path, headers, raw body)."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False      # answer nothing until the receiver is closed
    drip: bool = False      # answer one byte of headers at a time, never finishing them


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.replies: dict[str, Callable[[Received], Reply]] = {}
        self.released = threading.Event()      # set at teardown: every held reply goes
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str, reply: Reply | Callable[[Received], Reply]) -> None:
        if isinstance(reply, Reply):
            fixed = reply
            self.replies[path] = lambda _received: fixed
        else:
            self.replies[path] = reply

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path.split("?")[0] == path]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                got = Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(length))
                with receiver._lock:
                    receiver.received.append(got)
                route = receiver.replies.get(self.path.split("?")[0])
                reply = route(got) if route is not None else Reply(404)
                if reply.hang:
                    receiver.released.wait(60)
                    return
                if reply.drip:     # each byte within any read timeout, the headers never done
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    while not receiver.released.wait(0.05):
                        try:
                            self.wfile.write(b"x")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:   # quiet in test output
                pass

        return Handler


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.released.set()
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(10)
