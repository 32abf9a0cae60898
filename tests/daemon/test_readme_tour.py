"""The README's tour, pasted into a fresh directory as a user would: it must run as written,
on the embedded database, with the commands finding the daemon without flags."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.daemon]

README = Path(__file__).resolve().parents[2] / "README.md"


def tour_script() -> str:
    text = README.read_text()
    section = re.search(r"<!-- tour: start -->(.*?)<!-- tour: end -->", text, re.S)
    assert section, "the README lost its tour markers"
    blocks = re.findall(r"```sh\n(.*?)```", section.group(1), re.S)
    assert blocks, "the tour has no sh block"
    return "set -euo pipefail\n" + "\n".join(blocks)


def run_tour(directory: Path, bin_dir: Path) -> None:
    """Run the tour in ``directory`` with ``bin_dir`` (a venv's bin: its ``xjobsd``, its
    ``python``) first on PATH, and check what it printed and what it left behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJOBS_") and k != "NOTIFY_SOCKET"}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["XDG_RUNTIME_DIR"] = str(directory)          # the control socket lands here, not elsewhere
    env["XJOBS_METRICS"] = "127.0.0.1:0"           # a free port: another daemon may hold 9464
    proc = subprocess.run(["bash", "-c", tour_script()], cwd=directory, env=env, capture_output=True,
                          text=True, timeout=180)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said
    assert "send_welcome #1 on queue 'emails'" in proc.stdout
    assert "send_welcome #1 on queue 'emails' (deduped" in proc.stdout
    assert "queue emails paused fleet-wide" in proc.stdout
    assert "queue emails resumed" in proc.stdout
    assert f"database: embedded PostgreSQL in {directory / '.xjobs' / 'pgdata'}" in proc.stderr
    # the daemon is gone; the command starts the embedded database for itself
    shown = subprocess.run(["xjobsd", "jobs", "show", "1", "--json"], cwd=directory, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    job = orjson.loads(shown.stdout)
    assert (job["name"], job["state"], job["tenant"]) == ("send_welcome", "completed", "acme")
    assert job["progress"]["note"] == "welcomed user 1"


@pytest.mark.slow
def test_the_readme_tour_runs_as_written(tmp_path):
    pytest.importorskip("pgserver")
    run_tour(tmp_path, Path(sys.executable).parent)

