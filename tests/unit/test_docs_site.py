"""The documentation site builds from the pages as they are, with no warning: ``mkdocs build
--strict`` fails on a page missing from the nav, a link to a page or an anchor that is not
there, a snippet whose file is gone, and a docstring reference that does not resolve. The
command-line reference is written from the parser at build time, so every command has its
section; the example alert rules are checked by promtool where it is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from xjobs.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _commands(parser, words=()):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*words, name)
                yield from _commands(sub, (*words, name))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs, mkdocs-material, mkdocstrings) is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    said = built.stdout + built.stderr
    assert built.returncode == 0, said
    assert not re.search(r"^(WARNING|ERROR)\b", said, re.MULTILINE), said
    return out


def test_the_site_builds_without_a_warning(site):
    assert (site / "index.html").exists()
    # the tour is included from the README, not copied
    assert "A five-minute tour" in (site / "index.html").read_text()


def test_the_command_line_reference_has_every_command(site):
    page = (site / "reference" / "cli" / "index.html").read_text()
    missing = ["-".join(words) for words in _commands(build_parser())
               if f'id="{"-".join(words)}"' not in page]
    assert missing == []


def test_the_api_reference_has_every_public_name(site):
    import xjobs
    import xjobs.host
    import xjobs.testing
    page = (site / "reference" / "api" / "index.html").read_text()
    documented = {name for name in xjobs.__all__ if name not in ("REGISTRY", "DEFAULT_RETRY")}
    missing = [f"xjobs.{name}" for name in sorted(documented) if f'id="xjobs.{name}"' not in page]
    missing += [f"xjobs.host.{name}" for name in xjobs.host.__all__ if f'id="xjobs.host.{name}"' not in page]
    assert missing == []


def test_the_example_alert_rules_are_valid_and_fire():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    rules = ROOT / "docs" / "production" / "alerts.yml"
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool, "test", "rules", str(ROOT / "tests" / "unit" / "prometheus_alerts_test.yml")],
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
