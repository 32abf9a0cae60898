"""With no database configured, ``xjobsd run`` starts a private PostgreSQL (``pgserver``).

The data directory is ``./.xjobs/pgdata`` (absolute paths are printed); the server is shared
by every process that asks for it in this directory and stopped when the last one exits. The
daemon records where it lives (``./.xjobs/daemon.json``: its pid, database URL, schema and
control socket), so ``xjobsd enqueue``, ``jobs``, ``queues`` and ``status`` run from the same
directory find it without flags; with the daemon stopped they start the embedded server
themselves for as long as the command runs.

This is for trying xjobs on a laptop: production points ``XJOBS_DATABASE_URL`` at a real
server. PostgreSQL refuses to run as root, so as root pgserver runs it as the OS user
``pgserver`` (it creates that user), and the banner says so. Under systemd (``NOTIFY_SOCKET``
set) a missing database URL is far more likely a broken environment file than a wish for a
private database, so ``xjobsd run`` refuses unless ``--embedded`` asks for one.
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path
from typing import Any

import orjson

from ..errors import InvalidOption

ROOT = Path(".xjobs")
STATE_FILE = "daemon.json"
_cli_handles: list[Any] = []   # a command's server handle, kept until the process exits


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # its directory helper warns when XDG_RUNTIME_DIR is unset, which says nothing here
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise InvalidOption("dsn", "no database configured (pass --dsn or set XJOBS_DATABASE_URL), "
                                   "and the embedded PostgreSQL is not installed: "
                                   "pip install 'xjobs[embedded]'") from None
    return pgserver


def os_user() -> str | None:
    """The OS user the embedded server runs as, when it is not this process's own."""
    return "pgserver" if os.geteuid() == 0 else None


def start_embedded(root: Path = ROOT) -> tuple[str, Any, Path]:
    """Start (or join) the embedded server; answers its DSN, the handle keeping it up, and the
    absolute data directory."""
    pgserver = _pgserver()
    pgdata = (root / "pgdata").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
    return server.get_uri(), server, pgdata


def record_daemon(info: dict[str, Any], root: Path = ROOT) -> Path:
    """Write ``daemon.json`` (0600: the URL is a way into the database) atomically, never
    through a link somebody planted."""
    root.mkdir(mode=0o700, exist_ok=True)
    path = (root / STATE_FILE).resolve()
    temporary = path.with_suffix(".tmp")
    try:
        temporary.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    os.replace(temporary, path)
    return path


def forget_daemon(pid: int, root: Path = ROOT) -> None:
    """Remove ``daemon.json`` if it still describes the daemon ``pid`` (not a successor)."""
    info = recorded_daemon(root, alive_only=False)
    if info is not None and info.get("pid") == pid:
        try:
            (root / STATE_FILE).unlink()
        except FileNotFoundError:
            pass


def recorded_daemon(root: Path = ROOT, *, alive_only: bool = True) -> dict[str, Any] | None:
    """What ``daemon.json`` says, if it exists, belongs to this user and nobody else can
    write it (a command would otherwise connect where a stranger's file points it), and, by
    default, its daemon still runs."""
    path = root / STATE_FILE
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        info = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError, OSError):
        return None
    if not isinstance(info, dict):
        return None
    if alive_only and not _alive(info.get("pid")):
        return None
    return info


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def local_database(root: Path = ROOT) -> tuple[str, str | None] | None:
    """For a command run where ``xjobsd run`` keeps an embedded database: its DSN and schema.
    A running daemon's record is used as is; otherwise the server is started for this
    command (and stopped at its exit, unless a daemon shares it meanwhile)."""
    info = recorded_daemon(root)
    if info is not None and isinstance(info.get("dsn"), str):
        return info["dsn"], info.get("schema")
    if not (root / "pgdata" / "PG_VERSION").exists():
        return None
    dsn, server, _ = start_embedded(root)
    _cli_handles.append(server)   # pgserver stops it at exit when no other process shares it
    return dsn, None
