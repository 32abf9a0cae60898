"""What a user installs: the sdist and the wheel build and pass ``twine check``, the wheel holds
the files the daemon reads at run time, and installed alone in a fresh venv it runs the
README's tour; every ``pip install`` line of the README and the docs names something that exists."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import xjobs
from tests.daemon.test_readme_tour import README, run_tour
from tests.waiting import wait_for

pytestmark = [pytest.mark.daemon]

ROOT = README.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _run(*argv: str | Path, cwd: Path | None = None, timeout: float = 180) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.mark.slow
def test_the_built_wheel_installs_alone_and_runs_the_tour(tmp_path):
    pytest.importorskip("pgserver")
    dist = tmp_path / "dist"
    # --no-isolation: the dev venv's setuptools builds it, nothing is downloaded for the build
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT)
    version = xjobs.__version__
    wheel = dist / f"xjobsd-{version}-py3-none-any.whl"
    sdist = dist / f"xjobsd-{version}.tar.gz"
    assert wheel.exists() and sdist.exists(), sorted(p.name for p in dist.iterdir())
    _run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)

    names = set(zipfile.ZipFile(wheel).namelist())
    migrations = sorted(p.name for p in (ROOT / "xjobs" / "drivers" / "migrations").glob("*.sql"))
    ui = [p.relative_to(ROOT).as_posix() for d in ("static", "templates")
          for p in (ROOT / "xjobs" / "ui" / d).iterdir()]
    needed = {"xjobs/py.typed", "xjobs/drivers/queries.sql", *ui,
              *(f"xjobs/drivers/migrations/{m}" for m in migrations)}
    assert needed <= names, sorted(needed - names)
    metadata = zipfile.ZipFile(wheel).read(f"xjobsd-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata and "\nName: xjobsd\n" in metadata

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[embedded]", timeout=300)
    # the installed package, not the checkout, is what the fresh venv imports
    where = _run(venv / "bin" / "python", "-c", "import xjobs; print(xjobs.__file__)", cwd=tmp_path)
    assert where.startswith(str(venv)), where
    shown = _run(venv / "bin" / "xjobsd", "--version")
    from xjobs.drivers.sql import SCHEMA_VERSION
    assert shown == f"xjobsd {version} (schema {SCHEMA_VERSION})\n"
    tour = tmp_path / "tour"
    tour.mkdir()
    run_tour(tour, venv / "bin")


def readme_first_command() -> str:
    block = re.search(r"```sh\n(.*?)```", README.read_text(), re.S)
    assert block, "the README lost its set-up commands"
    first, second = block.group(1).strip().splitlines()
    assert "xjobsd run" in first and "pytest" in second, block.group(1)
    return first


@pytest.mark.slow
def test_the_readmes_first_command_installs_and_runs_the_daemon_as_written(tmp_path, request):
    """The README's first line, word for word, in a copy of the checkout with no database
    configured: a fresh venv, the install, and ``xjobsd run`` on the example app with its
    dashboard, on an embedded PostgreSQL; then a SIGTERM drains it. (The second line is what
    ``.ci/run`` runs.)"""
    pytest.importorskip("pgserver")
    # the embedded server's socket lives under the checkout's .xjobs/: a unix socket's path has
    # about a hundred bytes, which pytest's own tmp_path under xdist uses up
    checkout = Path(tempfile.mkdtemp(prefix="xj-", dir="/tmp")) / "checkout"
    request.addfinalizer(lambda: shutil.rmtree(checkout.parent, ignore_errors=True))
    shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".xjobs", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis",
        ".mypy_cache", "build", "dist", "site"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("XJOBS_") and k not in ("PYTHONPATH", "NOTIFY_SOCKET", "VIRTUAL_ENV")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)        # the control socket lands here, not elsewhere
    env["XJOBS_METRICS"] = "127.0.0.1:0"          # a free port: another daemon may hold 9464
    log = tmp_path / "said.log"
    with log.open("w") as said:
        proc = subprocess.Popen(["bash", "-c", readme_first_command()], cwd=checkout, env=env,
                                stdout=said, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "dashboard: http://127.0.0.1:8080/" in log.read_text() or proc.poll() is not None,
                 420, "the install, then the daemon's banner")
        assert proc.poll() is None, log.read_text()
        page = wait_for(lambda: _get("http://127.0.0.1:8080/"), 60, "the dashboard answering")
        assert "emails" in page, page[:500]
        assert f"database: embedded PostgreSQL in {checkout / '.xjobs' / 'pgdata'}" in log.read_text()
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) in (0, -signal.SIGTERM), log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _get(url: str) -> str | None:
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


def readme_install_targets() -> list[str]:
    """The target of every ``pip install`` in the README and the pages of docs/ (flags dropped,
    quotes taken off)."""
    targets = []
    text = "\n".join(p.read_text() for p in [README, *sorted((ROOT / "docs").rglob("*.md"))])
    for line in re.findall(r"pip install [^`&\n]*", text):
        words = [w.strip("'\"") for w in line.split()[2:] if not w.startswith("-")]
        assert words, line
        targets += words
    return targets


def test_every_readme_install_line_names_an_extra_and_a_path_that_exist():
    targets = readme_install_targets()
    assert len(targets) >= 5, targets      # the two at the top, the tour, the dashboard, traces
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    for target in targets:
        # until a release is published every install is of the checkout itself
        match = re.fullmatch(r"(?P<path>[^\[\]]+)(?:\[(?P<extras>[^\]]+)\])?", target)
        assert match and match["path"] == ".", target
        assert (ROOT / match["path"] / "pyproject.toml").exists(), target
        assert set((match["extras"] or "").split(",")) - {""} <= extras, target
