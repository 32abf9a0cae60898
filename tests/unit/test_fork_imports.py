"""What the supervisor of ``xjobsd run`` has imported when it forks: every child starts with
it in its memory (copy-on-write pages count whole in each child's resident set), so what only
the operator's commands, the dashboard, the assistants' tools or a scrape need stays out.

Checked in a fresh interpreter: ``xjobsd run``'s parser, every module ``cli/run.py`` imports
(at its top and inside its functions, the dashboard's apart: it is imported with ``--ui``
only), the roles a child hosts and the one fork, and an app that declares a job."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# imported by none of the supervisor's modules before a fork, so carried by no child
NOT_BEFORE_FORK = (
    "prometheus_client",     # the first scrape imports it, in the supervisor alone
    "croniter", "dateutil",  # the first task declared
    "xjobs.ui", "werkzeug", "jinja2", "waitress",   # the dashboard: --ui, or xjobsd ui
    "xjobs.mcp", "mcp",      # xjobsd mcp
    "django", "xjobs.contrib",   # --django
    "httpx", "fsspec",       # webhook() and export_rows() deliver with them, in their bodies
    "xjobs.admin", "xjobs.cli.jobs", "xjobs.cli.queues", "xjobs.cli.ui", "xjobs.cli.mcp",
)

_PROBE = r'''
import ast, importlib, json, sys
from xjobs.cli import build_parser
build_parser(only="run").parse_args(["run", "--app", "probe_app"])
import xjobs.cli.run as run_module

def absolute(node):
    if node.level == 0:
        return node.module
    base = run_module.__name__.rsplit(".", node.level)[0]
    return f"{base}.{node.module}" if node.module else base

for node in ast.walk(ast.parse(open(run_module.__file__).read())):
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        where = absolute(node)
        names = [where] + ([f"{where}.{alias.name}" for alias in node.names] if node.module is None else [])
    else:
        continue
    for name in names:
        if not name.startswith("xjobs.ui"):
            importlib.import_module(name)

import xjobs
import xjobs.supervisor.spawn, xjobs.supervisor.child
import xjobs.workers.queue_worker, xjobs.workers.scheduler, xjobs.workers.outbox_relay

@xjobs.job(queue="q", idempotency_key=lambda i: str(i), tenant="none")
def probe(ctx, input):
    return None

json.dump(sorted(sys.modules), sys.stdout)
'''


def _modules_before_fork() -> set[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_the_supervisor_forks_without_what_only_other_processes_or_commands_need() -> None:
    modules = _modules_before_fork()
    assert "psycopg" in modules and "xjobs.workers.queue_worker" in modules   # the probe ran the path
    carried = sorted(m for m in modules if any(m == name or m.startswith(f"{name}.") for name in NOT_BEFORE_FORK))
    assert carried == []
