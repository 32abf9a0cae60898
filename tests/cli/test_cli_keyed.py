"""The operator's view of concurrency by key: ``jobs show`` says a member's key and what a
waiting member waits for (its key at its concurrency, or the sequence's member in front), the
JSON carries the key's holders, and ``jobs cancel`` lets a dead member that holds its sequence go."""

from __future__ import annotations

import dataclasses

import pytest

from tests.cli.commands import as_json
from tests.drivers.parity import claim, new_job
from xjobs.drivers.base import Nack

pytestmark = pytest.mark.postgres


def test_show_says_what_a_member_waits_for_and_cancel_lets_a_held_sequence_go(xjobsd, driver):
    members = [new_job(f"m{i}", name="post")._replace(concurrency_key="acct", key_cap=1, key_hold=True)
               for i in range(2)]
    first, second = (e.id for e in driver.job_enqueue(members))
    pair = [new_job(f"p{i}", name="pair")._replace(concurrency_key="acct", key_cap=2) for i in range(3)]
    third = driver.job_enqueue(pair)[2].id
    text = xjobsd("jobs", "show", str(second)).stdout
    assert "'acct', 1 at once, a dead member keeps its place" in text
    assert f"sequence 'acct' behind job #{first}" in text
    assert "key 'acct' at its concurrency 2" in xjobsd("jobs", "show", str(third)).stdout
    shown = as_json(xjobsd("jobs", "show", str(second), "--json"))
    assert shown["key"] == {"key": "acct", "cap": 1, "hold": True, "waiting": True, "holders": [first]}
    assert shown["waiting"] == f"sequence 'acct' behind job #{first}"
    [job] = [j for j in claim(driver) if j.id == first]
    assert driver.job_nack(Nack(job.id, job.token, "dead", "boom", 0.0))
    lines = xjobsd("jobs", "show", str(first)).stdout.splitlines()
    assert not any(line.startswith("waiting ") for line in lines)     # the holder waits for nothing
    said = xjobsd("jobs", "cancel", str(first)).stdout
    assert f"job {first}: dead -> cancelled" in said
    assert driver.job_get(second).state == "ready"
