"""The backend on Django 6's own ``django.tasks`` (Python 3.12 and up), where the suite's
interpreter has Django 5.2 and the backport: this folder's tests run again in an interpreter
that has Django 6, named by ``XJOBS_DJANGO6_PYTHON`` (default ``/tmp/venv-dj6/bin/python``),
and are skipped, saying so, without one. To make one::

    python3.12 -m venv /tmp/venv-dj6
    /tmp/venv-dj6/bin/pip install "django>=6" pytest pytest-timeout pytest-xdist hypothesis .
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.daemon_fixtures import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PYTHON = os.environ.get("XJOBS_DJANGO6_PYTHON", "/tmp/venv-dj6/bin/python")
_VERSION = "import django, sys; print(django.VERSION[0]); sys.exit(django.VERSION[0] < 6)"


def _django6() -> str | None:
    if not Path(PYTHON).exists():
        return f"no interpreter at {PYTHON} (XJOBS_DJANGO6_PYTHON)"
    probe = subprocess.run([PYTHON, "-c", _VERSION], capture_output=True, text=True, timeout=60)
    return None if probe.returncode == 0 else f"{PYTHON} has no Django 6: {probe.stdout}{probe.stderr}"


def test_the_django_tests_pass_on_django_6(pg_dsn):
    why = _django6()
    if why is not None:
        pytest.skip(why)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XJOBS_TEST_DSN": pg_dsn}
    env.pop("DJANGO_SETTINGS_MODULE", None)   # this process's Django project, set up already
    run = subprocess.run([PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q",
                          "tests/django/test_backend.py", "tests/django/test_daemon.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
