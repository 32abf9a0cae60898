"""The dashboard as users start it: a ``ui`` child of ``xjobsd run --ui`` (restarted like any
child, on the socket the supervisor holds) and ``xjobsd ui`` alone, read over real HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

from xjobs.config import Settings, load_settings
from xjobs.errors import InvalidOption

from tests.daemon_fixtures import CLI, DaemonEnv, free_port, wait_for

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def post(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_ui_knobs_are_checked():
    with pytest.raises(InvalidOption, match="ui_trust_header"):
        Settings(ui_trust_header="X Forwarded User")
    with pytest.raises(InvalidOption, match="ui_actions"):
        load_settings(env={"XJOBS_UI_ACTIONS": "perhaps"})
    assert load_settings(env={"XJOBS_UI_ACTIONS": "yes", "XJOBS_UI": "127.0.0.1:8080"}).ui_actions is True


@pytest.mark.daemon
def test_a_dashboard_port_in_use_is_refused_at_start(daemon_env: DaemonEnv):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        daemon = daemon_env.start("--ui", f"127.0.0.1:{port}")
        assert daemon.wait(30) == 2
    assert "ui: cannot listen on" in daemon.output()


@pytest.mark.daemon
def test_the_ui_child_serves_and_is_restarted_on_the_same_socket(daemon_env: DaemonEnv):
    port = free_port()
    daemon = daemon_env.start("--ui", f"127.0.0.1:{port}")
    daemon.ready()
    base = f"http://127.0.0.1:{port}"
    code, page = get(base + "/")
    assert code == 200 and 'data-testid="children"' in page and "read-only" in page
    [child] = daemon.children(role="ui")
    os.kill(child["pid"], signal.SIGKILL)
    wait_for(lambda: any(c["restarts"] >= 1 and c["state"] == "ready" for c in daemon.children(role="ui")),
             20, "the ui child to be restarted")
    wait_for(lambda: get(base + "/jobs")[0] == 200, 20, "the restarted child to answer")
    assert post(base + "/queues/alpha/pause") == 403          # read-only without --ui-actions
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0


@pytest.mark.daemon
def test_xjobsd_ui_alone(daemon_env: DaemonEnv):
    port = free_port()
    proc = subprocess.Popen(CLI + ["ui", "--listen", f"127.0.0.1:{port}", "--actions"],
                            env={**daemon_env.process_env, "XJOBS_UI_TOKEN": "t0ken"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=daemon_env.tmp)
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/")[0] == 200, 20, "xjobsd ui to answer")
        job_id = daemon_env.enqueue_one("probe_from_ui", "alpha", {"n": 1}, key="one")
        code, page = get(f"http://127.0.0.1:{port}/jobs/{job_id}")
        assert code == 200 and "probe_from_ui" in page
        assert post(f"http://127.0.0.1:{port}/jobs/{job_id}/cancel") == 403   # no CSRF, nobody signed in
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert b"dashboard on http://127.0.0.1:" in (proc.stdout.read() if proc.stdout else b"")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.daemon
def test_status_names_the_dashboard_and_counts_its_requests(daemon_env: DaemonEnv):
    port = free_port()
    daemon = daemon_env.start("--ui", f"127.0.0.1:{port}")
    daemon.ready()
    for path in ("/", "/jobs", "/nope"):
        get(f"http://127.0.0.1:{port}{path}")
    wait_for(lambda: daemon.children(role="ui")[0]["stats"].get("requests", 0) >= 3, 20,
             "the ui child to report its requests")
    text = subprocess.run(CLI + ["status", "--control", daemon.control], env=daemon_env.process_env,
                          capture_output=True, text=True, timeout=30).stdout
    assert "request(s) answered, 0 with a server error" in text
