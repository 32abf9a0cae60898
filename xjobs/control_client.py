"""The control socket's client: how ``xjobsd status``, ``drain``, ``reload``, ``scale`` and the
dashboard ask a running daemon.

One request per connection: a line of JSON, ``{"command": NAME, ...}``, answered by one line
of JSON; the commands and their answers are listed with the server (``supervisor/control.py``).
Nothing answering at the path is ``ControlUnavailable`` (``X_DAEMON_UNAVAILABLE``, exit 1).
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

import orjson

from .errors import XJobsError


class ControlUnavailable(XJobsError):
    code = "X_DAEMON_UNAVAILABLE"


def default_path() -> str:
    """Where the daemon listens when told nothing: ``$XDG_RUNTIME_DIR/xjobsd.sock``, else
    ``./.xjobs/xjobsd.sock``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "xjobsd.sock")
    return os.path.join(".xjobs", "xjobsd.sock")


def request(path: str, command: str, timeout_s: float = 5.0, **fields: Any) -> dict[str, Any]:
    """Ask the daemon at ``path``; ``ControlUnavailable`` when nothing answers there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(path)
        except FileNotFoundError:
            raise ControlUnavailable(f"no xjobsd is running: no control socket at {path}") from None
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                raise ControlUnavailable(f"no xjobsd is running: nothing answers at {path}") from None
            raise ControlUnavailable(f"cannot reach xjobsd at {path}: {exc.strerror or exc}") from None
        try:
            sock.sendall(orjson.dumps({"command": command, **fields}) + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass   # a refusal may answer and close before reading: its answer is still there
        buffer = bytearray()
        while b"\n" not in buffer:
            try:
                chunk = sock.recv(1 << 16)
            except socket.timeout:
                raise ControlUnavailable(f"xjobsd at {path} did not answer within {timeout_s:g}s") from None
            except ConnectionResetError:
                break
            if not chunk:
                break
            buffer += chunk
        if not buffer:
            raise ControlUnavailable(f"xjobsd at {path} closed the connection without answering")
        answer = orjson.loads(bytes(buffer).split(b"\n", 1)[0])
        if not isinstance(answer, dict):
            raise ControlUnavailable(f"xjobsd at {path} answered something other than an object")
        return answer
    finally:
        sock.close()
