"""``xjobsd manifest``: a stable projection of the app's jobs and tasks, and its drift check."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

import xjobs
from xjobs.manifest import describe, drift, render

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
APP = "tests.apps.coord_app"


def xjobsd(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XJOBS_")}
    proc = subprocess.run([sys.executable, "-m", "xjobs.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == expect, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_the_committed_manifest_passes_and_a_changed_policy_is_a_diff(tmp_path):
    written = xjobsd("manifest", "--app", APP).stdout
    assert xjobsd("manifest", "--app", APP).stdout == written          # stable, run after run
    manifest = orjson.loads(written)
    names = [job["name"] for job in manifest["jobs"]]
    assert names == sorted(names) and {"beat", "outboxed", "capped_work"} <= set(names)
    [task] = manifest["tasks"]
    assert (task["name"], task["cron"], task["tz"], task["job"]) == ("every_second", "* * * * * *", "UTC", "beat")
    capped = next(job for job in manifest["jobs"] if job["name"] == "capped_work")
    assert capped["concurrency"] == 3 and capped["retry"]["attempts"] == 5 and capped["tenant"] == "none"
    committed = tmp_path / "xjobs.manifest.json"
    committed.write_text(written)
    assert "exactly" in xjobsd("manifest", "--app", APP, "--check", str(committed)).stdout
    committed.write_text(written.replace('"attempts": 5', '"attempts": 3', 1))   # the code "changed"
    diff = xjobsd("manifest", "--app", APP, "--check", str(committed), expect=1).stdout
    assert '-        "attempts": 3,' in diff and '+        "attempts": 5,' in diff
    xjobsd("manifest", "--app", APP, "--check", str(tmp_path / "missing.json"), expect=2)
    xjobsd("manifest", expect=2)                                        # which app?


def test_the_projection_names_what_matters_and_nothing_that_varies():
    registry = xjobs.Registry()

    class Flaky(Exception):
        pass
    xjobs.job(queue="mail", idempotency_key=lambda i: i["k"], tenant=lambda i: i["org"], registry=registry,
              name="zeta", retry=xjobs.Retry(attempts=2, delay="3s"), timeout="1m", retry_on=(Flaky,))(
        lambda ctx, i: None)

    async def alpha(ctx, i):
        return None
    xjobs.job(queue="mail", idempotency_key=lambda i: i["k"], tenant="none", registry=registry,
              dedupe_window="1h")(alpha)
    data = describe(registry)
    assert [job["name"] for job in data["jobs"]] == ["alpha", "zeta"]
    alpha_row, zeta = data["jobs"]
    assert alpha_row["async"] is True and alpha_row["dedupe_window_ms"] == 3_600_000.0
    assert zeta["tenant"] == "derived" and zeta["timeout_ms"] == 60_000.0
    assert zeta["retry"] == {"attempts": 2, "delay_ms": 3000.0, "max_delay_ms": 600_000.0,
                             "backoff": "exponential", "jitter": True}
    assert zeta["retry_on"] == [f"{__name__}.test_the_projection_names_what_matters_and_nothing_that_varies.<locals>.Flaky"]
    assert drift(render(registry), registry) == ""
    assert "0x" not in render(registry)        # no addresses of callables
