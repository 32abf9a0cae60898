"""The loop's two self-pipes: signals, recorded and nothing more, and wake-ups from threads.

Every handled signal gets a handler that does nothing (``_record``): the C-level wakeup fd
already writes the signal's number into a socketpair the arbiter's selector watches, so a
handler never logs, locks or does I/O. The loop then ``read``s the numbers and ``pop``s them
by name (``term``, ``hup``, ...) to dispatch to ``handle_<name>``. ``restore`` puts back the
handlers and the wakeup fd that were there before ``install``.

``WakeUp`` is how another thread (the probe, with a result) gets the loop out of ``select``.
"""

from __future__ import annotations

import signal
import socket
from collections import deque
from typing import Any, Iterator


def _record(signum: int, frame: Any) -> None:
    """Installed for every handled signal: the wakeup fd already carries the number."""


class SignalQueue:
    def __init__(self, names: dict[signal.Signals, str]) -> None:
        self.names = {int(signum): name for signum, name in names.items()}
        self.reader, self._writer = socket.socketpair()
        for sock in (self.reader, self._writer):
            sock.setblocking(False)
        self._pending: deque[int] = deque()
        self._previous_handlers: dict[int, Any] = {}
        self._previous_wakeup_fd = -1

    def install(self) -> None:
        self._previous_wakeup_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for signum in self.names:
            self._previous_handlers[signum] = signal.signal(signum, _record)

    def read(self) -> None:
        """The reader turned readable: queue every number it carries."""
        while True:
            try:
                data = self.reader.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            self._pending.extend(n for n in data if n in self.names)

    def pop(self) -> Iterator[str]:
        """The names of the signals received, in order, each once."""
        while self._pending:
            yield self.names[self._pending.popleft()]

    def restore(self) -> None:
        if self._previous_handlers:
            signal.set_wakeup_fd(self._previous_wakeup_fd)
            for signum, handler in self._previous_handlers.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self._previous_handlers = {}

    def close(self) -> None:
        """Close both ends (also what a fresh child does with the copies it inherited)."""
        self.reader.close()
        self._writer.close()


class WakeUp:
    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        for sock in (self.reader, self._writer):
            sock.setblocking(False)

    def __call__(self) -> None:
        """From any thread: make the reader readable (once is enough)."""
        try:
            self._writer.send(b"!")
        except (BlockingIOError, OSError):
            pass

    def clear(self) -> None:
        try:
            while self.reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def close(self) -> None:
        self.reader.close()
        self._writer.close()
