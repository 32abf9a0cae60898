"""The package type-checks: mypy, as ``[tool.mypy]`` in pyproject.toml configures it, reports
nothing anywhere in ``xjobs/``. mypy is in the ``dev`` extra, so the test command (and CI,
which runs it) always type-checks; a missing mypy fails here rather than skipping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_nothing_in_the_package():
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
