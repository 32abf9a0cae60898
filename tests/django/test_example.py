"""``examples/django_project`` stays a working project: Django's checks pass, and its task is
declared as the job ``xjobsd run --django mysite.settings`` runs (``python serve.py`` starts
both; the daemon test runs the same path on the tests' own project)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.daemon_fixtures import ROOT

EXAMPLE = ROOT / "examples" / "django_project"
DECLARED = ("import django; django.setup(); from shop.tasks import send_receipt; "
            "from xjobs.registry import REGISTRY; h = REGISTRY.get('shop.tasks.send_receipt'); "
            "print(h.queue, h.retry.attempts, h.timeout_ms)")


def test_the_example_project_checks_and_declares_its_task_as_a_job():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    check = subprocess.run([sys.executable, "manage.py", "check"], cwd=EXAMPLE, env=env,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    declared = subprocess.run([sys.executable, "-c", DECLARED], cwd=EXAMPLE, env=env,
                              capture_output=True, text=True, timeout=60)
    assert declared.stdout.split() == ["emails", "3", "60000.0"], declared.stdout + declared.stderr
