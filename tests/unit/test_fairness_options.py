"""``job(fairness=, fair_weights=)``: refused at declaration with a stable code, keyed at
enqueue, one way of claiming per queue, and shown in the manifest."""

from __future__ import annotations

import math

import pytest

import xjobs
from xjobs.drivers.memory import MemoryDriver
from xjobs.enqueue import enqueue_many
from xjobs.errors import FairnessMixed, InvalidOption, PayloadInvalid
from xjobs.manifest import describe


def declare(registry, name: str = "j", queue: str = "q", tenant=lambda i: i["t"], **options):
    return xjobs.job(queue=queue, idempotency_key=lambda i: str(i["n"]), tenant=tenant, name=name,
                     registry=registry, **options)(lambda ctx, i: None)


@pytest.mark.parametrize("options, option", [
    ({"fairness": "tenants"}, "fairness"),
    ({"fairness": 3}, "fairness"),
    ({"fair_weights": {"a": 2}}, "fair_weights"),
    ({"fairness": "tenant", "fair_weights": {"a": 0}}, "fair_weights['a']"),
    ({"fairness": "tenant", "fair_weights": {"a": math.inf}}, "fair_weights['a']"),
    ({"fairness": "tenant", "fair_weights": {"a": True}}, "fair_weights['a']"),
    ({"fairness": "tenant", "fair_weights": {"": 1}}, "fair_weights"),
    ({"fairness": "tenant", "fair_weights": [("a", 1)]}, "fair_weights"),
])
def test_a_bad_fairness_is_refused_at_declaration(options, option):
    with pytest.raises(InvalidOption) as err:
        declare(xjobs.Registry(), **options)
    assert err.value.code == "X_INVALID_OPTION" and err.value.option == option


def test_fairness_by_tenant_needs_a_tenant():
    with pytest.raises(InvalidOption) as err:
        declare(xjobs.Registry(), tenant="none", fairness="tenant")
    assert err.value.option == "fairness" and "tenant=\"none\"" in str(err.value)
    declare(xjobs.Registry(), tenant="none", fairness=lambda i: i["account"])   # a key function needs none


def test_a_queue_claims_one_way():
    registry = xjobs.Registry()
    declare(registry, "fair", fairness="tenant", fair_weights={"a": 2})
    with pytest.raises(FairnessMixed) as err:
        declare(registry, "plain")
    assert err.value.code == "X_JOB_FAIRNESS_MIXED" and "'fair'" in str(err.value) and "'plain'" in str(err.value)
    with pytest.raises(FairnessMixed):
        declare(registry, "heavier", fairness="tenant", fair_weights={"a": 3})
    declare(registry, "by_key", fairness=lambda i: i["k"], fair_weights={"a": 2, "b": 5})
    declare(registry, "elsewhere", queue="other")   # another queue may claim in arrival order
    declare(registry, "fair", fairness="tenant", fair_weights={"a": 2})   # the same declaration again


def test_each_row_carries_its_key():
    registry, driver = xjobs.Registry(), MemoryDriver()
    by_tenant = declare(registry, "t", fairness="tenant")
    by_key = declare(registry, "k", fairness=lambda i: i.get("account"))
    plain = declare(registry, "p", queue="other")
    [a] = enqueue_many(by_tenant, [{"t": "acme", "n": 1}], driver=driver)
    [b] = enqueue_many(by_key, [{"t": "acme", "n": 2, "account": 7}], driver=driver)
    [c] = enqueue_many(plain, [{"t": "acme", "n": 3}], driver=driver)
    assert [driver.job_get(e.id).fair_key for e in (a, b, c)] == ["acme", "7", None]
    for bad in ({"t": "acme", "n": 4}, {"t": "acme", "n": 5, "account": ""}):
        with pytest.raises(PayloadInvalid) as err:
            enqueue_many(by_key, [bad], driver=driver)
        assert err.value.code == "X_PAYLOAD_INVALID" and "fairness(input)" in str(err.value)


def test_the_manifest_shows_a_jobs_fairness():
    registry = xjobs.Registry()
    declare(registry, "fair", fairness="tenant", fair_weights={"b": 1.5, "a": 2})
    declare(registry, "keyed", queue="k", fairness=lambda i: i["k"])
    declare(registry, "plain", queue="p")
    shown = {job["name"]: job["fairness"] for job in describe(registry)["jobs"]}
    assert shown == {"fair": {"by": "tenant", "weights": {"a": 2.0, "b": 1.5}},
                     "keyed": {"by": "derived", "weights": {}}, "plain": None}
