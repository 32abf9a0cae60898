"""``sd_notify`` without libsystemd: one datagram to ``$NOTIFY_SOCKET`` per state change.

The supervisor says ``READY=1`` once its children are up, ``STATUS=`` with a one-line summary,
``RELOADING=1`` when a reload starts and ``READY=1`` again once it is complete,
``STOPPING=1`` at the accept phase, ``EXTEND_TIMEOUT_USEC=`` while a long close runs, and
``WATCHDOG=1`` only while its loop and children are healthy (``WatchdogSec=`` in the unit).
With no ``NOTIFY_SOCKET`` every call is a no-op, so the same code runs under a terminal.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        if address:
            # "@name" is an abstract socket: a leading NUL byte on the wire
            self._address = b"\0" + address[1:].encode() if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        mine = not pid or pid == str(os.getpid())
        self.watchdog_s: float | None = int(usec) / 1e6 if usec.isdigit() and mine else None

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: object) -> bool:
        """``send(READY=1, STATUS="...")``; answers False when nothing could be sent."""
        if self._sock is None or self._address is None:
            return False
        text = "\n".join(f"{key}={value}" for key, value in fields.items())
        try:
            self._sock.sendto(text.encode(), self._address)
            return True
        except OSError:
            return False

    def ready(self, status: str) -> bool:
        return self.send(READY=1, STATUS=status, MAINPID=os.getpid())

    def reloading(self, status: str) -> bool:
        """A reload began; ``ready`` ends it. systemd asks for the monotonic clock's reading
        (CLOCK_MONOTONIC, in microseconds) with it, to order it against the reload request."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(RELOADING=1, STATUS=status, MONOTONIC_USEC=usec)

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def stopping(self, status: str) -> bool:
        return self.send(STOPPING=1, STATUS=status)

    def extend_timeout(self, seconds: float) -> bool:
        return self.send(EXTEND_TIMEOUT_USEC=int(seconds * 1e6))

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def fileno(self) -> int | None:
        return self._sock.fileno() if self._sock is not None else None
