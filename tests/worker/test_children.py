"""Child jobs through a real QueueWorker on both drivers: ``ctx.step.invoke`` and
``ctx.step.map`` suspend their parent once and resume it with the children's outcome;
``xjobs.batch`` runs its callback once; a cancel of the root takes the tree down."""

from __future__ import annotations

import pytest

import xjobs
from xjobs.children import batch
from xjobs.children import store_of as fanins_of
from xjobs.enqueue import enqueue_many
from xjobs.errors import ChildFailed, CrossTenantDenied, InvalidOption, Terminal
from xjobs.retry import Retry

from .pacing import Pacer, make_worker

NO_DELAY = Retry(attempts=2, delay=0, jitter=False)


@pytest.fixture
def registry():
    return xjobs.Registry()


def declare(registry, fn, **options):
    options.setdefault("queue", "q")
    options.setdefault("idempotency_key", lambda i: str(i.get("n", 0)))
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_DELAY)
    return xjobs.job(registry=registry, **options)(fn)


def history_outcomes(driver, job_id):
    return [h["outcome"] for h in driver.job_get(job_id).history]


def test_map_suspends_the_parent_once_and_answers_the_results_in_input_order(driver, registry):
    ran: list[int] = []
    got: list = []

    def square(ctx, i):
        ran.append(i["x"])
        return i["x"] * i["x"]
    child = declare(registry, square, name="square", idempotency_key=lambda i: str(i["x"]))

    def parent(ctx, i):
        got.append(ctx.step.map("squares", child, [{"x": x} for x in range(7)]))
        got.append(ctx.step.invoke("one more", child, {"x": 10}))
    handle = declare(registry, parent, name="parent")
    [job] = enqueue_many(handle, [{"n": 1}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job.id).state == "completed", advance_ms=50)
    assert sorted(ran) == [*range(7), 10]                  # every body once
    results = got[-2:]
    assert results == [[x * x for x in range(7)], 100]
    view = driver.job_get(job.id)
    assert view.attempt == 1                               # suspending spent no attempt
    # one suspension per fan-in, one wake each: never a wake per child
    assert history_outcomes(driver, job.id).count("suspended") == 2
    children = fanins_of(driver).job_children(job.id, 100)
    assert children.counts == {"completed": 8}
    kids = [c for c in children.first if c.step == "squares"]
    assert len(kids) == 7 and all(driver.job_get(c.id).tenant is None for c in kids)
    steps = {s.name: s for s in driver.step_list(job.id).steps}
    assert steps["squares"].kind == "map" and steps["squares"].state == "completed"


def test_a_dead_child_fails_the_step_with_its_error_and_return_exceptions_keeps_it_in_place(driver, registry):
    seen: list = []

    def flaky(ctx, i):
        if i["x"] == 2:
            raise Terminal("no thumbnail for 2")
        return i["x"]
    child = declare(registry, flaky, name="flaky", idempotency_key=lambda i: str(i["x"]))

    def strict(ctx, i):
        try:
            ctx.step.map("all", child, [{"x": x} for x in range(4)])
        except ChildFailed as exc:
            seen.append(exc)
            raise

    def lenient(ctx, i):
        seen.append(ctx.step.map("all", child, [{"x": x} for x in range(4)], return_exceptions=True))
    first = enqueue_many(declare(registry, strict, name="strict", retry=Retry(attempts=1)), [{"n": 1}],
                         driver=driver)[0]
    lenient_handle = declare(registry, lenient, name="lenient")
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(first.id).state == "dead", advance_ms=50)
    [failure] = seen
    assert failure.code == "X_CHILD_FAILED" and failure.cause == "dead"
    assert [(index, state) for index, _, state, _ in failure.failures] == [(2, "dead")]
    assert "no thumbnail for 2" in str(failure) and "no thumbnail for 2" in driver.job_get(first.id).last_error
    seen.clear()
    second = enqueue_many(lenient_handle, [{"n": 2}], driver=driver)[0]
    pacer.until(lambda: driver.job_get(second.id).state == "completed", advance_ms=50)
    [values] = seen
    assert isinstance(values[2], ChildFailed) and values[2].failures[0][0] == 2
    assert [v for i, v in enumerate(values) if i != 2] == [0, 1, 3]


def test_a_batch_runs_its_callback_once_with_the_counts(driver, registry):
    calls: list = []

    def member(ctx, i):
        if i["x"] % 5 == 0:
            raise Terminal("a failing member")
    handle = declare(registry, member, name="member", idempotency_key=lambda i: str(i["x"]))
    done = declare(registry, lambda ctx, i: calls.append(i), name="done", idempotency_key=lambda i: "x")
    opened = batch(handle, [{"x": x} for x in range(20)], on_complete=done, on_complete_input={"to": "ops"},
                   driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(opened.callback_id).state == "completed", advance_ms=50)
    [got] = calls
    assert (got["input"], got["completed"], got["dead"], got["cancelled"]) == ({"to": "ops"}, 16, 4, 0)
    assert got["batch_id"] == opened.id and len(got["completed_ids"]) == 16
    assert sorted(got["dead_ids"]) == [opened.member_ids[x] for x in (0, 5, 10, 15)]
    with pytest.raises(InvalidOption):
        batch(handle, "not a list", on_complete=done, driver=driver)


def test_cancelling_the_root_cancels_every_live_descendant(driver, registry):
    def leaf(ctx, i):
        ctx.step.sleep("forever", "1d")
    leaves = declare(registry, leaf, name="leaf", idempotency_key=lambda i: str(i["x"]))

    def middle(ctx, i):
        ctx.step.map("leaves", leaves, [{"x": i["x"] * 10 + k} for k in range(3)])
    middles = declare(registry, middle, name="middle", idempotency_key=lambda i: str(i["x"]))

    def root(ctx, i):
        ctx.step.map("middles", middles, [{"x": x} for x in range(2)])
    [job] = enqueue_many(declare(registry, root, name="root"), [{"n": 1}], driver=driver)
    fanins = fanins_of(driver)
    pacer = Pacer(make_worker(driver, registry))

    def tree_suspended() -> bool:
        mids = fanins.job_children(job.id, 10).first
        return len(mids) == 2 and all(fanins.job_children(m.id, 10).counts.get("suspended") == 3 for m in mids)
    pacer.until(tree_suspended, advance_ms=50)
    driver.job_cancel(job.id, "operator")
    mids = [m.id for m in fanins.job_children(job.id, 10).first]
    tree = mids + [c.id for m in mids for c in fanins.job_children(m, 10).first]
    assert len(tree) == 8 and {driver.job_get(j).state for j in tree} == {"cancelled"}


def test_an_async_parent_awaits_its_children(driver, registry):
    got: list = []

    async def double(ctx, i):
        return i["x"] * 2
    child = declare(registry, double, name="double", idempotency_key=lambda i: str(i["x"]))

    async def parent(ctx, i):
        got.append(await ctx.step.map("doubles", child, [{"x": x} for x in range(3)]))
        got.append(await ctx.step.invoke("one", child, {"x": 5}, priority=1))
    [job] = enqueue_many(declare(registry, parent, name="async_parent"), [{"n": 1}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job.id).state == "completed", advance_ms=50)
    assert got[-2:] == [[0, 2, 4], 10]


def test_bad_arguments_are_refused_before_anything_is_written(driver, registry):
    seen: list = []
    child = declare(registry, lambda ctx, i: None, name="kid")

    def parent(ctx, i):
        for call in (lambda: ctx.step.map("a", "not a job", [{}]),
                     lambda: ctx.step.map("b", child, {"n": 1}),
                     lambda: ctx.step.map("c", child, [{"n": 1}], return_exceptions=1),
                     lambda: ctx.step.invoke("d", child, {"n": 1}, tenant="other")):
            try:
                call()
            except InvalidOption as exc:
                seen.append(exc.code)
    [job] = enqueue_many(declare(registry, parent, name="refusing"), [{"n": 1}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job.id).state == "completed", advance_ms=50)
    assert seen == ["X_INVALID_OPTION"] * 4
    assert fanins_of(driver).job_children(job.id, 10).counts == {}


def test_a_child_takes_its_own_tenant_and_none_of_its_parents_cross_tenant_grant(driver, registry):
    seen: dict = {}

    def org_child(ctx, i):
        seen["child tenant"] = ctx.tenant
        try:
            with ctx.cross_tenant("a sweep the child never declared"):
                seen["child crossed"] = True
        except CrossTenantDenied:
            seen["child crossed"] = False
        return i["org"]
    child = declare(registry, org_child, name="org_child", tenant=lambda i: i["org"],
                    idempotency_key=lambda i: i["org"])

    def parent(ctx, i):
        with ctx.cross_tenant("fanning out over the orgs"):    # the parent's own, declared grant
            seen["parent crossed"] = True
        return ctx.step.invoke("org b", child, {"org": "b"})
    handle = declare(registry, parent, name="org_parent", tenant=lambda i: i["org"], cross_tenant=True,
                     idempotency_key=lambda i: i["org"])
    [job] = enqueue_many(handle, [{"org": "a"}], driver=driver)
    pacer = Pacer(make_worker(driver, registry))
    pacer.until(lambda: driver.job_get(job.id).state == "completed", advance_ms=50)
    [kid] = fanins_of(driver).job_children(job.id, 10).first
    assert (driver.job_get(job.id).tenant, driver.job_get(kid.id).tenant) == ("a", "b")
    assert seen == {"parent crossed": True, "child tenant": "b", "child crossed": False}
    assert driver.job_get(job.id).result == "b"
