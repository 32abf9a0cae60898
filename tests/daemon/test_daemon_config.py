"""Bad configuration is refused at start, exit code 2, with a message naming the option."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.daemon_fixtures import APP, CLI, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def run(env, *args: str, app: str = APP, **extra_env: str) -> subprocess.CompletedProcess:
    argv = CLI + ["run", "--app", app, "--control", str(env.tmp / "c.sock"),
                  "--metrics", f"127.0.0.1:{free_port()}", *args]
    return subprocess.run(argv, cwd=env.tmp, env={**env.process_env, **extra_env},
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("spec", ["alpha=nanx4", "alpha=1xnan", "alpha=infx4", "alpha=1xinf",
                                  "alpha=-1x4", "alpha=1x-4", "alpha=1.5x4", "alpha=1x2.5",
                                  "alpha=0x4", "alpha=1x0"])
def test_bad_counts_are_refused(daemon_env, spec):
    result = run(daemon_env, "--queue", spec)
    assert result.returncode == 2, result.stderr
    assert "X_INVALID_OPTION: queue" in result.stderr and spec in result.stderr


@pytest.mark.parametrize("flag, value, option", [
    ("--drain-deadline", "nan", "drain_deadline"), ("--drain-deadline", "-5s", "drain_deadline"),
    ("--stats-interval", "inf", "stats_interval"), ("--recycle-after-jobs", "2.5", "recycle_after_jobs"),
    ("--recycle-after-jobs", "-1", "recycle_after_jobs"), ("--recycle-above-rss", "nan", "recycle_above_rss"),
])
def test_bad_knobs_are_refused(daemon_env, flag, value, option):
    result = run(daemon_env, f"{flag}={value}")
    assert result.returncode == 2, result.stderr
    assert option in result.stderr


def test_bad_environment_numbers_are_refused(daemon_env):
    result = run(daemon_env, XJOBS_LEASE="nan")
    assert result.returncode == 2 and "lease" in result.stderr
    result = run(daemon_env, XJOBS_QUEUES="alpha=1xinf")
    assert result.returncode == 2 and "queue" in result.stderr


def test_a_queue_without_registered_jobs_is_refused(daemon_env):
    result = run(daemon_env, "--queue", "alpha=1x4", "--queue", "nowhere=1x4")
    assert result.returncode == 2
    assert "queue" in result.stderr and "nowhere" in result.stderr


def test_an_unwritable_control_socket_path_is_refused(daemon_env):
    argv = CLI + ["run", "--app", APP, "--control", "/proc/xjobsd.sock", "--metrics", "off"]
    result = subprocess.run(argv, cwd=daemon_env.tmp, env=daemon_env.process_env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "control" in result.stderr and "/proc/xjobsd.sock" in result.stderr
    missing = str(daemon_env.tmp / "no" / "such" / "dir" / "x.sock")
    result = run(daemon_env, "--control", missing)
    assert result.returncode == 2 and "control" in result.stderr


def test_a_metrics_port_in_use_is_refused(daemon_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(daemon_env, "--metrics", f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert "metrics" in result.stderr and str(port) in result.stderr
    result = run(daemon_env, "--metrics", "localhost:notaport")
    assert result.returncode == 2 and "metrics" in result.stderr


def test_no_app_and_an_unimportable_app_are_refused(daemon_env):
    result = subprocess.run(CLI + ["run", "--metrics", "off", "--control", str(daemon_env.tmp / "c.sock")],
                            cwd=daemon_env.tmp, env=daemon_env.process_env, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2 and "app" in result.stderr
    result = run(daemon_env, app="tests.apps.does_not_exist")
    assert result.returncode == 2 and "app" in result.stderr


def test_an_app_that_fails_at_import_is_one_line_exit_2_and_its_traceback_at_debug(daemon_env):
    result = run(daemon_env, app="tests.apps.broken_app")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["xjobsd: X_INVALID_OPTION: app: cannot import 'tests.apps.broken_app': "
                     "RuntimeError: the settings module is missing BROKER_URL"], result.stderr
    verbose = run(daemon_env, "--log-level", "debug", app="tests.apps.broken_app")
    assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr


def test_strict_refuses_a_declared_queue_no_process_serves(daemon_env):
    result = run(daemon_env, "--queue", "alpha=1x1", "--strict")
    assert result.returncode == 2
    assert "no process serves these registered jobs (--strict)" in result.stderr
    assert "touch_beta on queue 'beta'" in result.stderr


def test_under_systemd_a_missing_database_is_refused_unless_embedded_is_asked_for(daemon_env):
    env = {k: v for k, v in daemon_env.process_env.items() if k != "XJOBS_DATABASE_URL"}
    result = subprocess.run(CLI + ["run", "--app", APP, "--metrics", "off", "--control",
                                   str(daemon_env.tmp / "c.sock")], cwd=daemon_env.tmp,
                            env={**env, "NOTIFY_SOCKET": str(daemon_env.tmp / "notify.sock")},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "no database configured under systemd" in result.stderr and "--embedded" in result.stderr
    assert not (daemon_env.tmp / ".xjobs" / "pgdata").exists()
