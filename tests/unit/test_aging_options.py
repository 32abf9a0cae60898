"""``job(aging=)``: refused at declaration with a stable code, one step per queue, the queue's
floor from its declared priorities, shown in the manifest and by ``jobs show``."""

from __future__ import annotations

import math

import pytest

import xjobs
from xjobs.aging import AgingMixed, queue_agings
from xjobs.clock import ManualClock
from xjobs.drivers.base import Aging
from xjobs.drivers.memory import MemoryDriver
from xjobs.enqueue import enqueue_many
from xjobs.manifest import describe
from xjobs.views import priority_shown


def declare(registry, name: str = "j", queue: str = "q", **options):
    return xjobs.job(queue=queue, idempotency_key=lambda i: str(i["n"]), tenant="none", name=name,
                     registry=registry, **options)(lambda ctx, i: None)


@pytest.mark.parametrize("aging", [0, "0ms", -1, "-1s", math.nan, math.inf, "soon", 0.5, True, [1]])
def test_a_bad_aging_is_refused_at_declaration(aging):
    registry = xjobs.Registry()
    with pytest.raises(xjobs.errors.InvalidOption) as err:
        declare(registry, aging=aging)
    assert err.value.code == "X_INVALID_OPTION" and err.value.option == "aging"
    assert registry.jobs() == []


def test_a_queue_ages_by_one_step():
    registry = xjobs.Registry()
    declare(registry, "a", aging="1m")
    with pytest.raises(AgingMixed) as err:
        declare(registry, "plain")
    assert err.value.code == "X_JOB_AGING_MIXED" and "'a'" in str(err.value) and "'plain'" in str(err.value)
    with pytest.raises(AgingMixed) as err:
        declare(registry, "faster", aging="30s")
    assert "1m" in str(err.value) and "30s" in str(err.value)
    declare(registry, "b", aging=60_000)         # the same step, in milliseconds
    declare(registry, "elsewhere", queue="other")  # another queue need not age
    declare(registry, "a", aging="1m")            # the same declaration again
    assert [h.name for h in registry.jobs()] == ["a", "b", "elsewhere"]


def test_a_queue_ages_down_to_its_best_declared_priority():
    registry = xjobs.Registry()
    declare(registry, "slow", priority=7, aging="300ms")
    assert queue_agings(registry.jobs()) == {"q": Aging("q", 300.0, 0)}   # never better than 0 unless declared
    declare(registry, "urgent", priority=-2, aging="300ms")
    declare(registry, "plain", queue="other", priority=-9)
    assert queue_agings(registry.jobs()) == {"q": Aging("q", 300.0, -2)}


def test_the_manifest_shows_aging_only_for_a_job_that_ages():
    registry = xjobs.Registry()
    declare(registry, "aged", aging="1m")
    declare(registry, "plain", queue="other")
    shown = {job["name"]: job.get("aging_ms", "absent") for job in describe(registry)["jobs"]}
    assert shown == {"aged": 60_000.0, "plain": "absent"}


def test_jobs_show_says_where_an_aged_priority_started():
    clock = ManualClock()
    driver = MemoryDriver(clock=clock)
    handle = declare(xjobs.Registry(), "aged", aging="1s")
    [job] = enqueue_many(handle, [{"n": 1}], priority=9, driver=driver)
    assert priority_shown(driver.job_get(job.id)) == "9"
    clock.advance(3_000)
    assert driver.job_age(Aging("q", 1_000.0, 0)) == 1
    view = driver.job_get(job.id)
    assert (view.priority, view.base_priority) == (6, 9)
    assert priority_shown(view) == "6 (enqueued at 9, aged)"
