"""``xjobsd ui``: the dashboard alone, in the foreground, for a machine that runs no workers.

    xjobsd ui --dsn URL [--listen 127.0.0.1:8080] [--app myapp.jobs] [--ui-actions]
              [--ui-trust-header X-Forwarded-User] [--control PATH]

``--app`` names the app's cron tasks on the schedules page (without it, the tasks the
database has watermarks for are listed by name). ``--control`` shows a local daemon's
children on the overview. Acting (retry, cancel, pause) needs ``--ui-actions`` and the token
in ``XJOBS_UI_TOKEN`` (or a trusted proxy's header): without them the dashboard only reads,
and actions enabled with neither are warned about at start.
SIGTERM or Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from ..logs import configure_logging
from . import here, setting_flags
from .common import add_database_flags, add_log_flags, driver_from, import_apps, settings_from


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ui", help="serve the dashboard alone (no workers)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", metavar="HOST:PORT", default=None,
                   help="where to serve it (default: XJOBS_UI, else 127.0.0.1:8080)")
    p.add_argument("--app", action="append", default=[], help="module declaring the app's cron tasks (repeatable)")
    # spelt as the settings (ui_actions, XJOBS_UI_ACTIONS) and `xjobsd run` spell them; the
    # former --actions and --trust-header still work, with a warning
    setting_flags.add(p, "ui_actions", "ui_trust_header",
                      former={"ui_actions": "--actions", "ui_trust_header": "--trust-header"},
                      help={"ui_actions": "allow retry, cancel and pause for who signs in with XJOBS_UI_TOKEN",
                            "ui_trust_header": "a trusted reverse proxy's header naming the signed-in user"})
    p.add_argument("--control", metavar="PATH", help="a local daemon's control socket, to show its children")
    add_database_flags(p)
    add_log_flags(p)
    p.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    from ..ui import listen
    listen.check_installed()
    settings = settings_from(args)
    here.warn_unprotected(settings)
    sock = listen.bind(args.listen or settings.ui or "127.0.0.1:8080")
    from ..registry import REGISTRY
    from ..supervisor.roles import ROLE_STATEMENT_TIMEOUT_MS
    from ..ui import serve as served
    import_apps(args.app or list(settings.apps))
    # the statements a ui child's are capped at, so a page that reads too much gives up alike
    driver = driver_from(settings, "xjobs-ui", pool_size=served.POOL_SIZE,
                         statement_timeout_ms=ROLE_STATEMENT_TIMEOUT_MS)
    app = served.dashboard(driver, settings, REGISTRY, args.control or os.environ.get("XJOBS_CONTROL"), sock)
    server = served.server_for(app, sock)

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)   # waitress' run() ends its threads on SystemExit
    signal.signal(signal.SIGTERM, stop)
    print(f"xjobsd ui: dashboard on {listen.announce(sock, settings.ui_actions)}, schema {settings.schema}",
          file=sys.stderr, flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        driver.close()
        sock.close()
    return 0
