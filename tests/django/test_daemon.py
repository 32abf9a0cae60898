"""The Django project's tasks under ``xjobsd run --django tests.django.settings``, as a user
runs it: a subprocess that sets Django up, finds the tasks modules of the installed apps, takes
its database from the project's backend (no ``--dsn``, no ``XJOBS_DATABASE_URL``), and runs the
jobs a committed view and plain ``enqueue()`` calls wrote, in forked workers that use the ORM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.daemon_fixtures import CLI, ROOT, free_port
from tests.django.conftest import SETTINGS, Project
from tests.waiting import wait_for
from xjobs.control_client import ControlUnavailable, request

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]


def start(project: Project, tmp: Path) -> tuple[subprocess.Popen, str, Path]:
    control, log_path = str(tmp / "control.sock"), tmp / "daemon.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("XJOBS_")
           or key.startswith("XJOBS_TEST_DJANGO_")}   # the database is the project's backend's
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               XDG_RUNTIME_DIR=str(tmp))
    env.pop("DJANGO_SETTINGS_MODULE", None)   # the flag says it
    env.pop("NOTIFY_SOCKET", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(CLI + ["run", "--django", SETTINGS, "--control", control,
                                       "--metrics", f"127.0.0.1:{free_port()}", "--queue", "default=1x4",
                                       "--queue", "emails=1x2"],
                                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, control, log_path


def ready(proc: subprocess.Popen, control: str, log_path: Path) -> dict:
    def check() -> dict | None:
        if proc.poll() is not None:
            raise AssertionError(f"xjobsd exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            answer = request(control, "status", timeout_s=5.0)
        except (ControlUnavailable, OSError):
            return None
        children = answer.get("children") or []
        return answer if children and all(c["state"] == "ready" for c in children) else None
    return wait_for(check, 30.0, "every child of xjobsd --django to be ready")


def test_a_committed_views_job_and_enqueued_tasks_run_under_xjobsd_run_django(project, tmp_path):
    from django.test import Client

    from tests.django.shop.tasks import add, decline, mark_sent
    from xjobs.contrib.django.compat import TaskResultStatus
    order = mark_sent.get_result(Client().get("/orders/21").json()["id"])
    summed, declined = add.enqueue(20, 22), decline.enqueue("card expired")
    proc, control, log_path = start(project, tmp_path)
    try:
        status = ready(proc, control, log_path)
        assert sorted(c["queue"] for c in status["children"] if c["role"] == "worker") == ["default", "emails"]

        def finished() -> bool:
            for result in (order, summed, declined):
                result.refresh()
            return all(result.is_finished for result in (order, summed, declined))
        wait_for(finished, 30.0, "the three tasks to finish")
        assert (order.status, order.return_value) == (TaskResultStatus.SUCCESSFUL, 21)
        assert project.sql("select note from {schema}.shop_order where number = 21") == [("sent",)]
        assert (summed.status, summed.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
        assert declined.status == TaskResultStatus.FAILED
        assert declined.errors[0].exception_class_path == "tests.django.shop.tasks.Declined"
        assert "card expired" in declined.errors[0].traceback
        # a reload re-reads the configuration; the Django project is not imported twice
        reloaded = request(control, "reload", timeout_s=30.0)
        assert reloaded.get("ok") is True, reloaded
        # a command run beside it imports the same app, the project found from the daemon's record
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"
               and (not k.startswith("XJOBS_") or k.startswith("XJOBS_TEST_DJANGO_"))}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        listed = subprocess.run(CLI + ["queues", "ls", "--json", "--dsn", project.dsn, "--schema", project.schema],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert {"default", "emails"} <= {q["name"] for q in json.loads(listed.stdout)}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_django_project_that_does_not_set_up_is_refused_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    refused = subprocess.run(CLI + ["run", "--django", "no_such_project.settings", "--control",
                                    str(tmp_path / "control.sock"), "--metrics", "off"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("xjobsd: X_INVALID_OPTION: app: cannot import 'xjobs.contrib.django.worker'")
    assert "no_such_project" in line


def test_xjobsd_tick_django_runs_the_projects_tasks_in_one_bounded_pass(project, tmp_path):
    from tests.django.shop.tasks import add
    result = add.enqueue(1, 41)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"
           and (not k.startswith("XJOBS_") or k.startswith("XJOBS_TEST_DJANGO_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    ticked = subprocess.run(CLI + ["tick", "--django", SETTINGS, "--deadline", "20s", "--json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ticked.returncode == 0, ticked.stdout + ticked.stderr
    assert json.loads(ticked.stdout)["jobs"]["tests.django.shop.tasks.add"] == {"completed": 1}
    result.refresh()
    assert result.return_value == 42


def test_xjobsd_enqueue_calls_a_task_with_the_args_of_its_input(project, tmp_path):
    from tests.django.shop.tasks import add
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"
           and (not k.startswith("XJOBS_") or k.startswith("XJOBS_TEST_DJANGO_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), XJOBS_DJANGO=SETTINGS)

    def enqueue(payload: str) -> subprocess.CompletedProcess:
        return subprocess.run(CLI + ["enqueue", "tests.django.shop.tasks.add", "--input", payload, "--json",
                                     "--dsn", project.dsn, "--schema", project.schema],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    done = enqueue('{"args": [2], "kwargs": {"b": 3}}')
    assert done.returncode == 0, done.stdout + done.stderr
    result = add.get_result(str(json.loads(done.stdout)["id"]))
    assert (result.status, result.args, result.kwargs) == ("READY", [2], {"b": 3})
    refused = enqueue('{"args": 5}')
    assert refused.returncode != 0 and "X_JOB_INPUT_INVALID" in refused.stderr
    assert "args must be a list" in refused.stderr
