"""What ``xjobsd run`` knows of the directory it runs from: the daemon recorded there
(``./.xjobs/daemon.json``, ``daemon_record.py``), the command a user types there, and what the
dashboard it serves lets through.

* **One record per directory.** Every daemon records itself (its pid, its app's modules, its
  schema, control socket and metrics address; the embedded database's URL only for an embedded
  database: a configured URL may carry a password, and stays where it was configured), so a
  command run beside it finds its app and its socket. A second daemon started there that
  would share the first one's control socket or metrics address is refused before it binds
  anything, naming the first (``X_DAEMON_RUNNING``); one given its own keeps the record as
  the first wrote it. A record is believed only while its control socket answers: after a
  crash its pid may belong to another process.
* **The command that works here.** The banner's "try" lines name the ``xjobsd`` that runs:
  ``xjobsd`` when that is what ``PATH`` finds, else its path (``.venv/bin/xjobsd``), with the
  line that activates its virtualenv.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .embedded import ROOT, STATE_FILE, record_daemon, recorded_daemon
from ..errors import DaemonRunning

if TYPE_CHECKING:
    from ..config import Settings

log = logging.getLogger("xjobs.supervisor")
_WILDCARDS = ("", "0.0.0.0", "::")


def other_daemon() -> dict[str, Any] | None:
    """The record of another daemon that runs from this directory, if its socket answers."""
    info = recorded_daemon()
    if info is None or info.get("pid") == os.getpid() or not _answers(info.get("control")):
        return None
    return info


def refuse_second(control: str, metrics: str | None) -> None:
    """``X_DAEMON_RUNNING`` when the daemon recorded here has the control socket or the
    metrics address this one would bind."""
    other = other_daemon()
    if other is None:
        return
    shared = []
    if other.get("control") == control:
        shared.append(f"its control socket {control}")
    theirs, ours = _address(other.get("metrics")), _address(metrics)
    if ours is not None and theirs is not None and ours[1] == theirs[1] and (
            ours[0] == theirs[0] or ours[0] in _WILDCARDS or theirs[0] in _WILDCARDS):
        shared.append(f"its metrics address {other['metrics']}")
    if shared:
        raise DaemonRunning(
            f"another xjobsd (pid {other['pid']}) runs from this directory "
            f"({(ROOT / STATE_FILE).absolute()}), with {' and '.join(shared)}",
            hint="`xjobsd status` shows it and `xjobsd drain` stops it; to run a second one here, "
                 "give it its own --control and --metrics")


def record(settings: Settings, control: str, metrics: str | None, pgdata: Path | None) -> bool:
    """Record this daemon here, unless another live one is recorded; True when it did."""
    if other_daemon() is not None:
        return False
    info: dict[str, Any] = {"pid": os.getpid(), "apps": list(settings.apps), "schema": settings.schema,
                            "control": control, "metrics": metrics}
    if settings.django:   # the commands run here import the app: they set the same project up
        info["django"] = settings.django
    if pgdata is not None:
        info.update(dsn=settings.dsn, pgdata=str(pgdata))
    try:
        record_daemon(info)
    except OSError as exc:   # a read-only working directory: the commands then need flags
        log.warning("cannot record this daemon in %s: %s", (ROOT / STATE_FILE).absolute(), exc)
        return False
    return True


def warn_unprotected(settings: Settings) -> None:
    """Actions enabled with nobody able to sign in: said once, at start."""
    if settings.ui_actions and not os.environ.get("XJOBS_UI_TOKEN") and not settings.ui_trust_header:
        logging.getLogger("xjobs.ui").warning("the dashboard's actions are enabled (ui_actions) but XJOBS_UI_TOKEN is not set "
                    "and no --ui-trust-header is configured: nobody can sign in, so it stays read-only")


def command() -> tuple[str, str | None]:
    """How to type ``xjobsd`` here, and the line that activates its virtualenv (None when
    plain ``xjobsd`` already is this one)."""
    running = _running_script()
    if running is None:
        return f"{Path(sys.executable).name} -m xjobs.cli", None
    found = shutil.which("xjobsd")
    if found is not None and _same(found, running):
        return "xjobsd", None
    shown = _relative(running)
    activate = running.parent / "activate"
    return shown, (f"source {_relative(activate)}" if activate.is_file() else None)


def _running_script() -> Path | None:
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "xjobsd" and argv0.is_file():
        return argv0.absolute()
    beside = Path(sys.executable).parent / "xjobsd"   # python -m xjobs.cli, in the same install
    return beside if beside.is_file() else None


def _same(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _relative(path: Path) -> str:
    """``.venv/bin/xjobsd`` under this directory, the absolute path elsewhere."""
    try:
        inside = path.absolute().relative_to(Path.cwd())
    except ValueError:
        return str(path.absolute())
    return str(inside) if "/" in str(inside) else f"./{inside}"


def _address(text: object) -> tuple[str, int] | None:
    """``HOST:PORT`` as compared, or None for none (off, or port 0: any free port)."""
    if not isinstance(text, str) or text.lower() in ("off", "none", "0"):
        return None
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return None
    host = host.strip("[]")
    return ("127.0.0.1" if host == "localhost" else host, int(port))


def _answers(path: object) -> bool:
    if not isinstance(path, str):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
