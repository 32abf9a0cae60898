"""Concurrency by key and sequences through a real worker, on both drivers: at most N runs of
one key at once, a worker whose only work waits for its keys claims nothing rather than
claiming and handing back, a sequence runs in enqueue order, and its dead member holds it
until it is cancelled (or is skipped); the declaration's refusals, the key's at enqueue, what
the manifest and ``jobs show`` say."""

from __future__ import annotations

import threading

import pytest

import xjobs
from xjobs import admin
from xjobs.drivers.base import ListFilter
from xjobs.errors import ConcurrencyKeyInvalid, InvalidOption
from xjobs.manifest import describe
from xjobs.views import shown

from .pacing import Pacer, declare, enqueue, make_worker


@pytest.fixture
def registry() -> xjobs.Registry:
    return xjobs.Registry()


class PerKey:
    """How many bodies of each key run at once (the most seen), and the order they started in."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.started: list[tuple[str, int]] = []
        self.fail = fail

    def body(self, ctx, i):
        with self.lock:
            self.now[i["k"]] = self.now.get(i["k"], 0) + 1
            self.most[i["k"]] = max(self.most.get(i["k"], 0), self.now[i["k"]])
            self.started.append((i["k"], i["n"]))
        try:
            ctx.signal.wait(0.01)   # long enough for a second claim to overlap, were it allowed
            if i["n"] in self.fail:
                raise RuntimeError(f"member {i['n']} fails")
        finally:
            with self.lock:
                self.now[i["k"]] -= 1

    def order(self, key: str) -> list[int]:
        return [n for k, n in self.started if k == key]


def keyed(registry, per: PerKey, **options):
    options.setdefault("concurrency_key", lambda i: i["k"])
    return declare(registry, per.body, name="sync", retry=xjobs.Retry(attempts=1), **options)


def test_a_key_runs_at_most_its_concurrency_and_nothing_is_claimed_to_be_handed_back(driver, registry):
    per = PerKey()
    handle = keyed(registry, per, concurrency=2)
    ids = enqueue(handle, driver, *({"n": n, "k": "a"} for n in range(8)), {"n": 8, "k": "b"}, {"n": 9, "k": "c"})
    pacer = Pacer(make_worker(driver, registry, concurrency=6, poll_ms=20))
    pacer.until(lambda: pacer.totals()["completed"] == 10, advance_ms=25)
    assert per.most["a"] <= 2 and per.most["b"] == per.most["c"] == 1
    assert (pacer.totals()["claimed"], pacer.totals()["shed"]) == (10, 0), pacer.totals()
    assert [driver.job_get(i).state for i in ids] == ["completed"] * 10


def test_a_sequence_runs_in_enqueue_order_and_a_dead_member_holds_it_until_cancelled(driver, registry):
    per = PerKey(fail={3})
    handle = keyed(registry, per, concurrency=1, ordered=True)
    ids = enqueue(handle, driver, *({"n": n, "k": "s"} for n in range(7)))
    other = enqueue(handle, driver, {"n": 100, "k": "t"})
    pacer = Pacer(make_worker(driver, registry, concurrency=4, poll_ms=20))
    pacer.until(lambda: driver.job_get(ids[3]).state == "dead" and driver.job_get(other[0]).state == "completed",
                advance_ms=25)
    claimed = pacer.totals()["claimed"]
    for _ in range(5):
        pacer.pass_(advance_ms=30)
    assert pacer.totals()["claimed"] == claimed           # the held sequence: nothing to claim, no spin
    waiting = driver.job_get(ids[4])
    assert waiting.state == "suspended" and shown(waiting)["waiting"] == f"sequence 's' behind job #{ids[3]}"
    admin.cancel_job(driver, ids[3], by="test")          # a held dead member can be cancelled
    pacer.until(lambda: pacer.totals()["completed"] == 7, advance_ms=25)
    assert per.order("s") == list(range(7)) and per.most["s"] == 1


def test_a_skipping_sequence_goes_on_past_a_dead_member(driver, registry):
    per = PerKey(fail={1})
    handle = keyed(registry, per, concurrency=1, ordered=True, on_failure="skip")
    ids = enqueue(handle, driver, *({"n": n, "k": "s"} for n in range(4)))
    pacer = Pacer(make_worker(driver, registry, concurrency=4, poll_ms=20))
    pacer.until(lambda: pacer.totals()["completed"] == 3, advance_ms=25)
    assert per.order("s") == [0, 1, 2, 3]
    assert [driver.job_get(i).state for i in ids] == ["completed", "dead", "completed", "completed"]


def test_the_keyed_options_are_refused_at_declaration(registry):
    def refused(**options) -> str:
        with pytest.raises(InvalidOption) as err:
            declare(registry, lambda ctx, i: None, name="bad", **options)
        return err.value.option

    assert refused(concurrency_key=lambda i: "k") == "concurrency_key"              # no concurrency
    assert refused(concurrency=1, concurrency_key="k") == "concurrency_key"         # not callable
    assert refused(concurrency=2, concurrency_key=lambda i: "k", ordered=True) == "ordered"
    assert refused(ordered=True) == "ordered"
    assert refused(concurrency=1, concurrency_key=lambda i: "k", on_failure="skip") == "on_failure"
    assert refused(concurrency=1, concurrency_key=lambda i: "k", ordered=True, on_failure="drop") == "on_failure"
    assert refused(concurrency=1, concurrency_key=lambda i: "k", ordered="yes") == "ordered"
    assert refused(concurrency=0, concurrency_key=lambda i: "k") == "concurrency"


@pytest.mark.parametrize("key", [lambda i: 7, lambda i: "", lambda i: "x" * 257, lambda i: "a\x00b",
                                 lambda i: i["missing"]])
def test_a_bad_key_is_refused_at_enqueue_before_anything_is_written(memory_driver, registry, key):
    handle = declare(registry, lambda ctx, i: None, name="bad", concurrency=1, concurrency_key=key)
    with pytest.raises(ConcurrencyKeyInvalid) as err:
        enqueue(handle, memory_driver, {"n": 1}, {"n": 2})
    assert err.value.code == "X_JOB_CONCURRENCY_KEY_INVALID"
    assert memory_driver.job_list(ListFilter()) == []


def test_the_manifest_and_jobs_show_say_what_a_key_does(memory_driver, registry):
    handle = declare(registry, lambda ctx, i: None, name="sync", concurrency=3, concurrency_key=lambda i: i["k"])
    declare(registry, lambda ctx, i: None, name="plain", concurrency=2)
    jobs = {j["name"]: j for j in describe(registry)["jobs"]}
    assert jobs["sync"]["concurrency"] is None and jobs["sync"]["concurrency_key"]["concurrency"] == 3
    assert (jobs["sync"]["concurrency_key"]["ordered"], jobs["sync"]["concurrency_key"]["on_failure"]) == (False, None)
    assert jobs["plain"]["concurrency"] == 2 and "concurrency_key" not in jobs["plain"]
    ids = enqueue(handle, memory_driver, *({"n": n, "k": "acct"} for n in range(4)))
    view = shown(memory_driver.job_get(ids[3]))
    assert view["waiting"] == "key 'acct' at its concurrency 3"
    assert view["key"] == {"key": "acct", "cap": 3, "hold": False, "waiting": True, "holders": ids[:3]}
    assert shown(memory_driver.job_get(ids[0]))["waiting"] is None
