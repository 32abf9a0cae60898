"""A daemon and the directory it runs from: every daemon records itself there, so the commands
run beside it find its app with no flag (the record, else its control socket); a second one
that would share its socket or port is refused, naming it, before it binds anything; the
banner names the ``xjobsd`` that works there; ``ps`` tells daemons apart by their app; and
dashboard actions nobody can sign in for are said at start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable

import orjson
import pytest

from tests.daemon_fixtures import APP, CLI, DaemonEnv, free_port
from tests.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]
TASKS_APP = "tests.apps.coord_app"     # a cron task every second, on the queue beats


def xjobsd_in(env: DaemonEnv, cwd: Path, **extra: str) -> Callable[..., subprocess.CompletedProcess]:
    cwd.mkdir(exist_ok=True)

    def run(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run(CLI + list(args), cwd=cwd, env={**env.process_env, **extra},
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
        return proc
    return run


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()


def test_commands_beside_a_daemon_find_its_app_and_ps_names_it(daemon_env):
    env = daemon_env
    daemon = env.start("--app", TASKS_APP, "--queue", "beats=1x4")
    daemon.ready()
    record = orjson.loads((env.tmp / ".xjobs" / "daemon.json").read_bytes())
    assert (record["pid"], record["apps"], record["control"]) == (daemon.pid, [APP, TASKS_APP], daemon.control)
    assert "dsn" not in record      # a configured URL stays where it was configured

    # ps tells this daemon from another by its app
    title = f"xjobsd[{APP},{TASKS_APP}]"
    assert cmdline(daemon.pid) == f"{title}: supervisor"
    for child in daemon.status()["children"]:
        where = f" queue={child['queue']}" if child["queue"] else ""
        assert cmdline(child["pid"]) == f"{title}: {child['role']}{where} #{child['index']}"

    here = xjobsd_in(env, env.tmp)
    assert here("status").stdout.startswith(f"xjobsd pid {daemon.pid}: running, up ")
    assert f", app {APP}, {TASKS_APP}, schema {env.schema}," in here("status").stdout.splitlines()[0]
    listed = wait_for(lambda: [t for t in orjson.loads(here("tasks", "ls", "--json").stdout)["tasks"]
                               if t["dispatched"] > 0], 15, "the task, dispatching, listed with no --app")
    assert [t["name"] for t in listed] == ["every_second"]
    assert here("enqueue", "touch_beta", "--input", '{"n": 1}').stdout.startswith("touch_beta #")
    queues = {q["name"] for q in orjson.loads(here("queues", "ls", "--json").stdout)}
    assert {"alpha", "soak_a", "capped", "beta"} <= queues    # declared, no job on most of them

    # with no record, the control socket says what the daemon runs ...
    (env.tmp / ".xjobs" / "daemon.json").unlink()
    by_socket = xjobsd_in(env, env.tmp, XJOBS_CONTROL=daemon.control)
    assert [t["name"] for t in orjson.loads(by_socket("tasks", "ls", "--json").stdout)["tasks"]] == ["every_second"]
    # ... but only to a command run where it runs: elsewhere its app is nobody's
    elsewhere = xjobsd_in(env, env.tmp / "elsewhere", XJOBS_CONTROL=daemon.control)
    said = elsewhere("tasks", "ls", expect=2).stderr
    assert said.startswith("xjobsd: X_INVALID_OPTION: app: no app to list the tasks of") and "--app MODULE" in said
    said = elsewhere("enqueue", "touch_beta", "--input", '{"n": 2}', expect=2).stderr
    assert said.startswith("xjobsd: X_JOB_UNKNOWN: no job named 'touch_beta' is registered (hint: no app was given")


def test_a_second_daemon_sharing_the_first_ones_socket_is_refused_before_binding_anything(daemon_env):
    env = daemon_env
    first = env.start("--queue", "alpha=1x1")
    first.ready()
    ui_port = free_port()
    proc = subprocess.run(CLI + ["run", "--app", APP, "--queue", "alpha=1x1", "--control", first.control,
                                 "--metrics", f"127.0.0.1:{first.port}", "--ui", f"127.0.0.1:{ui_port}"],
                          cwd=env.tmp, env=env.process_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    [refusal] = [line for line in proc.stderr.splitlines() if line.startswith("xjobsd: X_")]
    assert refusal == (
        f"xjobsd: X_DAEMON_RUNNING: another xjobsd (pid {first.pid}) runs from this directory "
        f"({env.tmp / '.xjobs' / 'daemon.json'}), with its control socket {first.control} and its metrics "
        f"address 127.0.0.1:{first.port} (hint: `xjobsd status` shows it and `xjobsd drain` stops it; "
        "to run a second one here, give it its own --control and --metrics)")
    assert "Address already in use" not in proc.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", ui_port))          # its dashboard port was never bound
    assert first.status()["pid"] == first.pid       # and the first one's socket is still its own

    # one given its own socket and port runs beside it; the record stays the first one's
    second = env.start("--queue", "alpha=1x1")
    second.ready()
    assert orjson.loads((env.tmp / ".xjobs" / "daemon.json").read_bytes())["pid"] == first.pid
    second.signal(signal.SIGTERM)
    assert second.wait(20) == 0
    assert (env.tmp / ".xjobs" / "daemon.json").exists()   # its exit left the first one's record


def test_the_banner_names_the_xjobsd_that_works_from_this_directory(daemon_env):
    env = daemon_env
    script = Path(sys.executable).parent / "xjobsd"
    if not script.is_file():
        pytest.skip("no xjobsd console script beside this interpreter")
    # as the README's first command runs it: `.venv/bin/xjobsd run`, with PATH not leading there
    (env.tmp / ".venv").mkdir()
    (env.tmp / ".venv" / "bin").symlink_to(script.parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and Path(p).resolve() != script.parent.resolve())
    log = env.tmp / "venv-daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([".venv/bin/xjobsd", "run", "--app", APP, "--queue", "alpha=1x1",
                                 "--control", str(env.tmp / "venv.sock"), "--metrics", "127.0.0.1:0"],
                                cwd=env.tmp, env={**env.process_env, "PATH": path}, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "xjobsd queues ls" in log.read_text(), 30, "the banner")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    banner = log.read_text().splitlines()
    assert "  try, from this directory (or `source .venv/bin/activate` first, then plain `xjobsd`):" in banner
    assert {"    .venv/bin/xjobsd status", "    .venv/bin/xjobsd enqueue touch_alpha --input '{...}'",
            "    .venv/bin/xjobsd jobs ls"} <= set(banner)

    # where PATH finds this very xjobsd, its plain name works
    daemon = env.start("--queue", "alpha=1x1", PATH=os.pathsep.join([str(script.parent), path]))
    daemon.ready()
    banner = daemon.output().splitlines()
    assert "  try, from this directory:" in banner and "    xjobsd status" in banner


def test_dashboard_actions_nobody_can_sign_in_for_are_warned_about_at_start(daemon_env):
    pytest.importorskip("waitress", reason="the dashboard needs the ui extra")
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x1", "--ui", f"127.0.0.1:{free_port()}", "--ui-actions")
    daemon.ready()
    warned = [line for line in daemon.output().splitlines() if "XJOBS_UI_TOKEN" in line]
    assert len(warned) == 1 and " WARNING " in warned[0], warned
    assert "actions are enabled (ui_actions) but XJOBS_UI_TOKEN is not set" in warned[0]

    # `xjobsd ui` spells the switch as the setting does; its former --actions still works, warned
    log = env.tmp / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(CLI + ["ui", "--listen", f"127.0.0.1:{free_port()}", "--actions"], cwd=env.tmp,
                                env={**env.process_env, "XJOBS_UI_TOKEN": "a token"}, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "dashboard on" in log.read_text(), 30, "the dashboard to serve")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    said = log.read_text()
    assert "xjobsd: warning: --actions is deprecated: say --ui-actions" in said
    assert "(actions for who signs in)" in said and "XJOBS_UI_TOKEN is not set" not in said
