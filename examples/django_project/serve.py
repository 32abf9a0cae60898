"""The example in one command, from this directory::

    python serve.py            # PostgreSQL at DATABASE_URL (default: the local postgres database)

It applies the project's migrations, starts ``xjobsd run --django mysite.settings`` (which
installs the queue's schema and runs the tasks), waits until its workers are ready, then
serves the site with ``manage.py runserver``. Then, from another terminal::

    curl http://127.0.0.1:8000/orders/1            # an order, and its receipt's job, committed together
    curl http://127.0.0.1:8000/results/<result_id>  # READY, then SUCCESSFUL with its return value
    curl http://127.0.0.1:8000/orders/2?fail=1     # the view raises: no order, no job

Ctrl-C stops both: the daemon drains its running jobs first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONTROL = HERE / ".xjobs" / "xjobsd.sock"


def daemon_ready(proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    from xjobs.control_client import ControlUnavailable, request
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"xjobsd exited with {proc.returncode}")
        try:
            children = request(str(CONTROL), "status", timeout_s=2.0).get("children") or []
            if children and all(child["state"] == "ready" for child in children):
                return
        except (ControlUnavailable, OSError):
            pass
        time.sleep(0.2)   # a person's script polling a daemon that has no way to call back
    sys.exit("xjobsd did not become ready")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)   # the daemon drains: running jobs finish or go back to ready
        proc.wait(60)


def main() -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # stopped like Ctrl-C: both go down
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--verbosity", "0"], cwd=HERE, env=env, check=True)
    CONTROL.parent.mkdir(exist_ok=True)
    daemon = subprocess.Popen([python, "-m", "xjobs.cli", "run", "--django", "mysite.settings",
                               "--control", str(CONTROL), "--metrics", "off"], cwd=HERE, env=env)
    web: subprocess.Popen[bytes] | None = None
    try:
        daemon_ready(daemon)
        web = subprocess.Popen([python, "manage.py", "runserver", "--noreload", "127.0.0.1:8000"],
                               cwd=HERE, env=env)
        web.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if web is not None:
            stop(web)
        stop(daemon)
    return 0


if __name__ == "__main__":
    sys.exit(main())
