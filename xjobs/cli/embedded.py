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
import warnings
from pathlib import Path
from typing import Any

# the record is read by the API too (a Python shell in this directory finds the database)
from ..daemon_record import (ROOT as ROOT, STATE_FILE as STATE_FILE, forget_daemon as forget_daemon,
                             record_daemon as record_daemon, recorded_daemon as recorded_daemon,
                             recorded_database)
from ..errors import InvalidOption
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
                                   "pip install 'xjobsd[embedded]'") from None
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


def local_database(root: Path = ROOT) -> tuple[str, str | None] | None:
    """For a command run where ``xjobsd run`` keeps an embedded database: its DSN and schema.
    A running daemon's record is used as is; otherwise the server is started for this
    command (and stopped at its exit, unless a daemon shares it meanwhile)."""
    recorded = recorded_database(root)
    if recorded is not None:
        return recorded
    if not (root / "pgdata" / "PG_VERSION").exists():
        return None
    dsn, server, _ = start_embedded(root)
    _cli_handles.append(server)   # pgserver stops it at exit when no other process shares it
    return dsn, None
