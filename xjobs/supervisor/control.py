"""The control socket's server: a Unix stream socket, mode 0600, answering one request per
connection (the client, which the CLI and the dashboard use, is ``xjobs/control_client.py``).

A request is one line of JSON, ``{"command": NAME, ...}``; the answer is one line of JSON and
the server closes. Connections from another user are refused (``SO_PEERCRED``; root is let in,
as it could read the socket file anyway). Each command is one small handler on the arbiter:

=========  ======================================  ==============================================
command    request                                 CLI
=========  ======================================  ==============================================
status     ``{"command": "status"}``               ``xjobsd status [--json]``
drain      ``{"command": "drain"}``                ``xjobsd drain``    (same as SIGTERM)
reload     ``{"command": "reload"}``               ``xjobsd reload [--wait]`` (as SIGHUP)
scale      ``{"command": "scale", "queue": Q,      ``xjobsd scale Q +1`` / ``-1`` / ``=3``
           "delta": N}`` or ``"processes": N``,    ``[--allow-zero]`` (signals: SIGTTIN/SIGTTOU,
           optional ``"allow_zero": true``         every queue, clamped to 1..256)
=========  ======================================  ==============================================

A refusal answers ``{"ok": false, "error": TEXT}`` and, when it is a coded error, ``"code"``
(``X_INVALID_OPTION`` names the field: a scale leaving a queue with no process, or more than
256, is refused, not clamped; ``X_APP_INVALID``: a reload found the app does not import).

``reload`` answers once the app has been validated in a fresh process and the plan is made:
``{"ok": true, "generation": N, "groups": [replaced, ...], "unchanged": [...], "changes":
[TEXT, ...]}``. Its handler answers later (``Deferred``): the connection stays open, exempt
from the request timeout, until then. ``status`` also answers ``"reload": {"state":
"idle"|"validating"|"reloading", "generation": N, "replacing": GROUP, "last": {...}}``, which
``xjobsd reload --wait`` polls until the state is idle again.

The server side lives in the arbiter's selector loop: accepting and reading never block it
(a client gets ``_CLIENT_TIMEOUT_S`` to send its line), and the answer is written with a
short timeout so a client that stops reading cannot stall supervision.

A socket file left at the path is taken over only when it is provably stale: connecting to
it is refused (nobody listens) or it vanished meanwhile. Anything else, including a daemon
too busy to answer at once, means someone owns it, and the start is refused. At exit the
path is unlinked only if it is still the socket this daemon bound (same device and inode):
never a successor's.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Any, Callable, NotRequired, TypedDict

import orjson

from ..errors import InvalidOption, XJobsError
from ..options import finite_count

log = logging.getLogger("xjobs.supervisor.control")
_MAX_REQUEST = 64 * 1024
_CLIENT_TIMEOUT_S = 2.0
_PEERCRED = struct.Struct("3i")
_BOUND: dict[str, tuple[int, int]] = {}   # absolute path -> (device, inode) of the socket bound there


def bind(path: str) -> socket.socket:
    """Listen at ``path`` (0600), replacing a stale socket; refusals name the option."""
    target = Path(path)
    if len(os.fsencode(str(target))) > 100:
        raise InvalidOption("control", f"socket path too long for a Unix socket: {path}")
    if target.parent == Path(".xjobs"):
        target.parent.mkdir(mode=0o700, exist_ok=True)
    if target.exists() or target.is_symlink():
        if not stat.S_ISSOCK(target.lstat().st_mode):
            raise InvalidOption("control", f"{path} exists and is not a socket")
        if _stale(str(target)):
            try:
                target.unlink()   # a previous daemon died without cleaning up
            except FileNotFoundError:
                pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(target))
        os.chmod(str(target), 0o600)
        st = os.lstat(str(target))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidOption("control", f"another process took {path} meanwhile") from None
        raise InvalidOption("control", f"cannot create the control socket at {path}: {exc.strerror}") from None
    finally:
        os.umask(old_umask)
    _BOUND[os.path.abspath(str(target))] = (st.st_dev, st.st_ino)
    sock.listen(16)
    sock.setblocking(False)
    return sock


def _stale(path: str) -> bool:
    """True only when nobody can be listening at ``path``; refuses the start otherwise."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return True
        raise InvalidOption("control", f"{path} is in use by another process (connecting: "
                                       f"{exc.strerror or exc}); pass another --control path") from None
    finally:
        probe.close()
    raise InvalidOption("control", f"another xjobsd already answers at {path}")


class _Client:
    __slots__ = ("sock", "buffer", "since")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.since = time.monotonic()


class Deferred:
    """What a handler answers when its answer comes later: the server hands it the client's
    connection, and ``reply`` (once, from the loop) writes the answer and closes it. A reply
    made before the server handed the connection over is written as soon as it does."""

    def __init__(self) -> None:
        self._conn: socket.socket | None = None
        self._answer: dict[str, Any] | None = None

    @property
    def answer(self) -> dict[str, Any] | None:
        """The answer, once replied."""
        return self._answer

    def reply(self, answer: dict[str, Any]) -> None:
        if self._answer is None:
            self._answer = answer
            self._send()

    def attach(self, conn: socket.socket) -> None:
        self._conn = conn
        self._send()

    def _send(self) -> None:
        if self._conn is not None and self._answer is not None:
            _answer(self._conn, self._answer)
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


class ControlServer:
    """Owned by the arbiter: it registers ``listener`` and each client in its selector."""

    def __init__(self, path: str, listener: socket.socket,
                 handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any] | Deferred]]) -> None:
        self.path = path
        self.listener = listener
        self.handlers = handlers
        self.clients: dict[int, _Client] = {}

    def accept(self) -> list[socket.socket]:
        """New connections from this user, ready to be registered for reading."""
        accepted: list[socket.socket] = []
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            except OSError:
                return accepted
            pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                             _PEERCRED.size))
            if uid not in (os.getuid(), 0):
                _answer(conn, {"ok": False, "error": "refused: the control socket answers its own user"})
                conn.close()
                continue
            conn.setblocking(False)
            self.clients[conn.fileno()] = _Client(conn)
            accepted.append(conn)

    def readable(self, conn: socket.socket) -> bool:
        """Read what arrived; once a line is complete, answer and answer True (done)."""
        client = self.clients.get(conn.fileno())
        if client is None:
            return True
        try:
            data = conn.recv(_MAX_REQUEST)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        client.buffer += data
        if b"\n" not in client.buffer and data and len(client.buffer) < _MAX_REQUEST:
            return False
        line = bytes(client.buffer).split(b"\n", 1)[0]
        self._respond(conn, line)
        return True

    def expired(self, now: float) -> list[socket.socket]:
        return [c.sock for c in self.clients.values() if now - c.since > _CLIENT_TIMEOUT_S]

    def drop(self, conn: socket.socket) -> None:
        """Close a client's connection, unless a ``Deferred`` answer took it over."""
        if self.clients.pop(conn.fileno(), None) is None:
            return
        try:
            conn.close()
        except OSError:
            pass

    def _respond(self, conn: socket.socket, line: bytes) -> None:
        answer: dict[str, Any] | Deferred
        try:
            message = orjson.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not an object")
            handler = self.handlers.get(str(message.get("command")))
            if handler is None:
                answer = {"ok": False, "error": f"unknown command {message.get('command')!r}; "
                                                f"known: {', '.join(sorted(self.handlers))}"}
            else:
                answer = handler(message)
        except XJobsError as exc:   # first: InvalidOption is a ValueError too, and keeps its code
            answer = {"ok": False, "error": str(exc), "code": exc.code}
        except (orjson.JSONDecodeError, ValueError) as exc:
            answer = {"ok": False, "error": f"bad request: {exc}"}
        except Exception as exc:   # a failing command must not take the supervisor down
            log.exception("control command failed")
            answer = {"ok": False, "error": f"internal error: {exc!r}"}
        if isinstance(answer, Deferred):
            self.clients.pop(conn.fileno(), None)   # its answer owns the connection from now on
            answer.attach(conn)
            return
        _answer(conn, answer)

    def close(self) -> None:
        for client in list(self.clients.values()):
            self.drop(client.sock)
        unlink_socket(self.path)   # first: while it listens, nobody else can have taken the path
        try:
            self.listener.close()
        except OSError:
            pass


class ScaleRequest(TypedDict):
    """The keyword arguments of ``Arbiter.scale``: set ``processes`` or shift by ``delta``."""
    queue: str | None
    allow_zero: bool
    concurrency: int | None
    processes: NotRequired[int]
    delta: NotRequired[int]


def scale_request(message: dict[str, Any]) -> ScaleRequest:
    """The arguments of ``Arbiter.scale`` a ``scale`` message carries, each refused with its
    code when it is not what ``xjobsd scale`` sends."""
    queue = message.get("queue")
    if queue is not None and not isinstance(queue, str):
        raise InvalidOption("queue", "must be a queue name")
    allow_zero = message.get("allow_zero", False)
    if not isinstance(allow_zero, bool):
        raise InvalidOption("allow_zero", f"must be true or false, got {allow_zero!r}")
    concurrency = message.get("concurrency")
    if concurrency is not None:
        concurrency = finite_count(concurrency, "concurrency", minimum=1, maximum=10_000)
    request = ScaleRequest(queue=queue, allow_zero=allow_zero, concurrency=concurrency)
    if message.get("processes") is not None:
        request["processes"] = finite_count(message["processes"], "processes")
        return request
    delta = message.get("delta", 1)
    if isinstance(delta, bool) or not isinstance(delta, int):
        raise InvalidOption("delta", f"must be a whole number, got {delta!r}")
    request["delta"] = delta
    return request


def unlink_socket(path: str) -> None:
    """Remove ``path`` if it is still the socket ``bind`` created there in this process."""
    key = os.path.abspath(path)
    bound = _BOUND.get(key)
    try:
        st = os.lstat(path)
        if bound is not None and stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) == bound:
            os.unlink(path)
            _BOUND.pop(key, None)
    except OSError:
        pass


def _answer(conn: socket.socket, answer: dict[str, Any]) -> None:
    try:
        conn.settimeout(1.0)
        conn.sendall(orjson.dumps(answer) + b"\n")
    except OSError:
        pass
