"""What ``jobs show`` says of a job held back by its rate key: a line "waiting for rate key K
until T" in the text, and the key's window under ``rate_key`` in ``--json``; the manifest's
``rate``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.cli.commands import as_json
from tests.drivers.parity import claim, new_job
from xjobs.drivers.rate_keys import RateAsk, rate_keys_of

pytestmark = pytest.mark.postgres


def test_show_says_which_rate_key_a_ready_job_waits_for_and_until_when(xjobsd, driver):
    ids = [r.id for r in driver.job_enqueue([new_job(f"k{i}", name="calls")._replace(rate_key="acme-key")
                                             for i in range(2)])]
    plain = driver.job_enqueue([new_job("plain", name="calls")])[0].id
    [first] = claim(driver, limit=1)
    store = rate_keys_of(driver)
    assert store is not None
    assert [g.granted for g in store.rate_take([RateAsk(first.id, first.token, 1, 3_600_000.0)])] == [True]
    text = xjobsd("jobs", "show", str(ids[1])).stdout
    line = next(ln for ln in text.splitlines() if ln.startswith("waiting for"))
    assert "rate key acme-key until " in line and "(1 of 1 started in its window)" in line
    shown = as_json(xjobsd("jobs", "show", str(ids[1]), "--json"))
    assert shown["rate_key"]["key"] == "acme-key" and shown["rate_key"]["cap"] == 1
    assert shown["rate_key"]["waiting_until"].endswith("+00:00")
    running = as_json(xjobsd("jobs", "show", str(ids[0]), "--json"))
    assert running["state"] == "running" and running["rate_key"]["waiting_until"] is None
    assert "rate_key" not in as_json(xjobsd("jobs", "show", str(plain), "--json"))
    assert "waiting for" not in xjobsd("jobs", "show", str(plain)).stdout
