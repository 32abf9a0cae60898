"""``xjobsd`` as an operator types it: the command line in a subprocess, run from the
repository's root (so ``--app tests.apps...`` imports), its JSON answer read back."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

import orjson

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def xjobsd_on(dsn: str, schema: str) -> Callable[..., subprocess.CompletedProcess]:
    """``run(*args, expect=0)``: ``xjobsd *args`` against ``schema``, failing unless it exits ``expect``."""
    env = {**os.environ, "XJOBS_DATABASE_URL": dsn, "XJOBS_SCHEMA": schema}

    def run(*args: str, expect: int = 0):
        proc = subprocess.run([sys.executable, "-m", "xjobs.cli", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        return proc
    return run


def as_json(proc):
    return orjson.loads(proc.stdout)
