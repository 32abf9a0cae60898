"""The dashboard draws a workflow: a job's page names its parent, counts its children and
shows the tree from its root with each node's state; the jobs page filters by parent."""

from __future__ import annotations

import pytest

pytest.importorskip("werkzeug", reason="the dashboard needs the ui extra")

from tests.drivers.parity import claim, new_job, run  # noqa: E402
from tests.ui.clients import client  # noqa: E402
from xjobs.drivers.base import Lease  # noqa: E402
from xjobs.drivers.fanins import FanOut  # noqa: E402


def test_the_job_page_draws_the_workflow_tree_with_each_state(driver):
    root, lease = run(driver, "root", name="root")
    driver.fanins.fanin_open(lease, FanOut("mids", 1, 2, [[new_job(f"m{i}", name="mid") for i in range(2)]]))
    mids = [c.id for c in driver.fanins.job_children(root, 10).first]
    [mid] = [j for j in claim(driver, limit=10) if j.id == mids[0]]
    driver.fanins.fanin_open(Lease(mid.id, mid.token), FanOut("leaves", 1, 3,
                                                              [[new_job(f"l{i}", name="leaf") for i in range(3)]]))
    leaves = [c.id for c in driver.fanins.job_children(mid.id, 10).first]
    c = client(driver)
    page = c.get(f"/jobs/{leaves[1]}").get_data(as_text=True)
    assert 'data-testid="tree"' in page and f'data-testid="parent">job {mid.id}</a>' in page
    for job_id in (root, *mids, *leaves):
        assert f'data-job="{job_id}"' in page
    assert "suspended" in page and "ready" in page
    parent_page = c.get(f"/jobs/{mid.id}").get_data(as_text=True)
    assert "3 children" in parent_page and "3 ready" in parent_page
    listed = c.get(f"/jobs?parent={mid.id}").get_data(as_text=True)
    assert all(f"/jobs/{leaf}" in listed for leaf in leaves) and f"/jobs/{root}\"" not in listed
    plain, _ = run(driver, "plain", name="plain")
    assert 'data-testid="tree"' not in c.get(f"/jobs/{plain}").get_data(as_text=True)
    assert c.get("/jobs?parent=x").status_code == 400
