"""``xjobsd mcp``'s status tool against a running daemon answers what ``xjobsd status --json``
prints: the same children, queues and figures, over the same control socket."""

from __future__ import annotations

import subprocess

import orjson
import pytest

from tests.daemon_fixtures import CLI

pytest.importorskip("mcp", reason="xjobsd mcp needs the mcp extra")

from tests.cli.mcp_client import answered, with_server  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.daemon]

# what moves between two reads a moment apart: how long each process has been up and since
# it was last heard, how old the queue figures and their oldest ready job are, and a child's
# running counts (the scheduler's rounds go on), of which the fields are kept
_MOVING = {"uptime", "heartbeat_age", "as_of_seconds", "oldest_ready_seconds", "drain_deadline_in",
           "description"}


def steady(value):
    if isinstance(value, dict):
        return {k: sorted(v) if k == "stats" else steady(v) for k, v in value.items() if k not in _MOVING}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def test_the_status_tool_answers_what_xjobsd_status_json_prints(daemon_env):
    env = daemon_env
    daemon = env.start("--queue", "alpha=1x2")
    daemon.ready()
    printed = subprocess.run(CLI + ["status", "--json", "--control", daemon.control], cwd=env.tmp,
                             env=env.process_env, capture_output=True, text=True, timeout=30)
    assert printed.returncode == 0, printed.stderr

    async def talk(client):
        return answered(await client.call_tool("status"))

    # started as a client starts it, in the daemon's directory and told nothing: it finds the
    # daemon's socket as `xjobsd status` does, from the record the daemon keeps there
    passed = {k: env.process_env[k] for k in ("XJOBS_DATABASE_URL", "XJOBS_SCHEMA", "PYTHONPATH", "XDG_RUNTIME_DIR")}
    got = with_server(passed, [], talk, cwd=env.tmp)
    assert steady(got) == steady(orjson.loads(printed.stdout))
    assert got["pid"] == daemon.pid and got["state"] == "running"
    assert sorted(c["role"] for c in got["children"]) == ["outbox-relay", "scheduler", "worker"]
