"""With no database configured, ``xjobsd run`` starts a private PostgreSQL (``pgserver``).

The data directory is ``./.xjobs/pgdata``; the server is reused by the next start and stopped
when the supervisor exits. This is for trying xjobs on a laptop: production points
``XJOBS_DATABASE_URL`` at a real server.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

from ..errors import InvalidOption

ROOT = Path(".xjobs")


def start_embedded(root: Path = ROOT) -> tuple[str, Any]:
    """Start (or reuse) the embedded server; answers its DSN and the handle keeping it up."""
    try:
        with warnings.catch_warnings():
            # its directory helper warns when XDG_RUNTIME_DIR is unset, which says nothing here
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        raise InvalidOption("dsn", "no database configured (pass --dsn or set XJOBS_DATABASE_URL), "
                                   "and the embedded PostgreSQL is not installed: "
                                   "pip install 'xjobs[embedded]'") from None
    pgdata = (root / "pgdata").resolve()
    pgdata.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
    dsn = server.get_uri()
    print(f"xjobsd: no database configured; started an embedded PostgreSQL in {pgdata} "
          f"(XJOBS_DATABASE_URL={dsn})", file=sys.stderr, flush=True)
    return dsn, server
