"""The fault battery's short run: ``bench/faults.py`` with a fixed seed for about a minute of
faults, as a user runs it (a subprocess). It runs on a private PostgreSQL cluster of its own,
never the suite's server, and ends with its invariants checked in SQL; a failure shows the
battery's report, which names the invariant, the offending ids, and the command that replays
the same faults. ``pytest tests/daemon/test_faults.py`` (or ``-k faults``) runs it alone."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _find_binaries() -> Path | None:
    """The battery's own answer (bench/faults_cluster.py), loaded without putting bench/ on
    the suite's sys.path."""
    spec = importlib.util.spec_from_file_location("_faults_cluster", ROOT / "bench" / "faults_cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find_binaries()

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

SEED = 9        # its first faults: a reset, a worker killed, an immediate restart, the hog, a skewed clock
DURATION_S = 45


def _cluster_unavailable() -> str | None:
    if _find_binaries() is None:
        return "no PostgreSQL binaries (initdb, pg_ctl, postgres) for the battery's private cluster"
    if os.geteuid() == 0:
        import pwd
        for user in ("postgres", "pgserver"):
            try:
                pwd.getpwnam(user)
                return None
            except KeyError:
                continue
        return "running as root with no OS user 'postgres' or 'pgserver' to run PostgreSQL as"
    return None


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_fault_battery_short_run_passes(tmp_path):
    reason = _cluster_unavailable()
    if reason:
        pytest.skip(reason)
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "faults.py"), "--seed", str(SEED),
                           "--duration", str(DURATION_S), "--logs", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=380, cwd=ROOT)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert f"PASS: seed {SEED}" in done.stdout, report
    assert "invariants:" in done.stdout and "FAIL " not in done.stdout, report
