"""The code type-checks: mypy, as ``[tool.mypy]`` in pyproject.toml configures it, reports
nothing anywhere in ``xjobs/`` (strict) nor in ``tests/`` (every body checked, in the tests'
own lenient section: a deliberate wrong argument is marked where it is written). mypy is in
the ``dev`` extra, so the test command (and CI, which runs it) always type-checks; a missing
mypy fails here rather than skipping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mypy_finds_nothing_in_the_package():
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_mypy_finds_nothing_in_the_tests():
    # the whole tree, wherever its files sit; a cache of its own, so that two test processes
    # never write one cache at once
    run = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context",
                          "--cache-dir", str(ROOT / ".mypy_cache" / "tests"), "tests"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
