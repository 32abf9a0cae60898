"""The record ``xjobsd run`` keeps of itself in ``./.xjobs/daemon.json``: its pid, database
URL, schema and control socket. The daemon writes it; any process started in the same
directory reads it to find that daemon's database with nothing configured: the commands
(``xjobsd enqueue``, ``jobs``, ``queues``, ``status``) and the API (``handle.enqueue()`` or
``xjobs.get()`` in a Python shell there).

A record is believed only if it belongs to this user, nobody else can write it (a process
would otherwise connect where a stranger's file points it), and its daemon still runs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(".xjobs")
STATE_FILE = "daemon.json"


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
    """What ``daemon.json`` says, if it is believed (see above); ``alive_only=False`` also
    answers the record of a daemon that has stopped."""
    info, _ = _read(root, alive_only)
    return info


def recorded_database(root: Path = ROOT) -> tuple[str, str | None] | None:
    """The database URL and schema of the running daemon recorded under ``root``."""
    info = recorded_daemon(root)
    if info is None or not isinstance(info.get("dsn"), str) or not info["dsn"]:
        return None
    schema = info.get("schema")
    return info["dsn"], schema if isinstance(schema, str) and schema else None


def why_no_database(root: Path = ROOT) -> str:
    """What the record under ``root`` says instead of a database, for a refusal to name."""
    info, why = _read(root, alive_only=True)
    if info is not None and not isinstance(info.get("dsn"), str):
        return f"{(root / STATE_FILE).absolute()} names no database URL"
    return why


def _read(root: Path, alive_only: bool) -> tuple[dict[str, Any] | None, str]:
    path = root / STATE_FILE
    where = path.absolute()
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None, f"{where} is ignored: not a file of this user's that only it can write"
        info = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None, f"no {where} (`xjobsd run` writes it there while it runs)"
    except (orjson.JSONDecodeError, OSError) as exc:
        return None, f"{where} cannot be read: {exc}"
    if not isinstance(info, dict):
        return None, f"{where} holds no JSON object"
    if alive_only and not alive(info.get("pid")):
        return None, f"{where} names pid {info.get('pid')}, which is not running (`xjobsd run` stopped)"
    return info, ""


def alive(pid: object) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
