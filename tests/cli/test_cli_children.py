"""The operator's view of a workflow: ``jobs show`` names a job's parent and counts its
children, ``jobs ls --parent`` lists them, and ``jobs cancel`` of a parent says that its live
children go with it."""

from __future__ import annotations

import pytest

from tests.cli.commands import as_json
from tests.drivers.parity import claim, new_job
from xjobs.drivers.base import Lease
from xjobs.drivers.fanins import FanOut

pytestmark = pytest.mark.postgres


def test_show_ls_parent_and_cancel_with_children(xjobsd, driver):
    [parent] = driver.job_enqueue([new_job("p", name="parent")])
    [job] = claim(driver)
    kids = [new_job(f"c{i}", name="child", payload={"i": i}) for i in range(3)]
    assert driver.fanins.fanin_open(Lease(job.id, job.token), FanOut("fan", 1, 3, [kids])).suspended
    shown = as_json(xjobsd("jobs", "show", str(parent.id), "--json"))
    assert shown["parent"] is None and shown["children"]["counts"] == {"ready": 3}
    child_ids = [c["id"] for c in shown["children"]["first"]]
    assert len(child_ids) == 3
    listed = as_json(xjobsd("jobs", "ls", "--parent", str(parent.id), "--json"))
    assert sorted(j["id"] for j in listed) == child_ids
    one = as_json(xjobsd("jobs", "show", str(child_ids[0]), "--json"))
    assert one["parent"] == {"id": parent.id, "step": "fan"}
    text = xjobsd("jobs", "show", str(parent.id)).stdout
    assert "children" in text and "3: 3 ready" in text
    said = xjobsd("jobs", "cancel", str(parent.id)).stdout
    assert f"job {parent.id}: suspended -> cancelled" in said and "with children: its 3 live child job(s)" in said
    assert {driver.job_get(c).state for c in child_ids} == {"cancelled"}
    refused = xjobsd("jobs", "ls", "--parent", "x", expect=2)
    assert "X_INVALID_OPTION: parent: must be a whole number" in refused.stderr
