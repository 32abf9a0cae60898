"""``export_rows()`` on the memory driver, through a real queue worker: a factory over
``job()``, one part per page named by its index, streamed (the checkpoints landed at each
write read 0, 1, 2, ...), the same bytes when a page runs again, the size bound, the refused
knobs, and no cross-tenant escape for any export."""

from __future__ import annotations

import math

import pytest

import xjobs
from xjobs.enqueue import enqueue_many
from xjobs.errors import InvalidOption
from xjobs.factories.csv_parts import encode_part
from xjobs.factories.export import part_name
from xjobs.manifest import describe
from xjobs.retry import Retry
from tests.worker.pacing import Pacer, enqueue, make_worker

NO_DELAY = Retry(attempts=3, delay=0, jitter=False)
COLUMNS = ["id", "name", "amount"]


def table(n: int) -> list[dict]:
    """Rows whose names take turns at being formulas; amounts are negative every third row."""
    leads = ["", "=", "+", "-", "@", "\t", "\r"]
    return [{"id": i, "name": f"{leads[i % len(leads)]}name {i}", "amount": -i if i % 3 == 0 else i * 1.5}
            for i in range(n)]


def keyset(rows: list[dict], reads: list | None = None):
    """source(input, cursor, limit) over ``rows``, keyed by id; ``reads`` records each cursor."""
    def source(input, cursor, limit):
        if reads is not None:
            reads.append(cursor)
        start = 0 if cursor is None else cursor + 1
        page = rows[start:start + limit]
        return page, (page[-1]["id"] if len(page) == limit else None)
    return source


class Bucket:
    """An app's store: every put in order, and for each how many page checkpoints had landed."""

    def __init__(self, driver=None):
        self.driver = driver
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []
        self.landed: list[int] = []
        self.fail_at: set[str] = set()

    def put(self, key: str, data: bytes) -> None:
        if key in self.fail_at:
            self.fail_at.discard(key)
            raise OSError(f"the store dropped {key}")
        if self.driver is not None:
            run = xjobs.current()
            assert run is not None
            steps = self.driver.step_list(run.job_id).steps
            self.landed.append(sum(1 for s in steps if s.name.startswith("page:")))
        self.puts.append(key)
        self.objects[key] = data


def run_all(driver, registry):
    pacer = Pacer(make_worker(driver, registry))
    before = pacer.totals()["completed"] + pacer.totals()["dead"]
    pacer.until(lambda: pacer.totals()["completed"] + pacer.totals()["dead"] > before, advance_ms=100)
    return pacer


def declare(registry, source, to, **options):
    options.setdefault("tenant", "none")
    options.setdefault("retry", NO_DELAY)
    options.setdefault("queue", "q")
    return xjobs.export_rows(name=options.pop("name", "orders"), source=source, columns=COLUMNS, to=to,
                             registry=registry, **options)


def test_ten_thousand_rows_in_pages_of_a_thousand_stream_into_ten_parts(memory_driver):
    registry = xjobs.Registry()
    rows = table(10_000)
    bucket = Bucket(memory_driver)
    handle = declare(registry, keyset(rows), bucket, page=1000)
    assert isinstance(handle, xjobs.JobHandle)
    [job_id] = enqueue(handle, memory_driver, {"day": "2026-12-01"})
    run_all(memory_driver, registry)
    assert memory_driver.job_get(job_id).state == "completed"
    assert bucket.puts == [part_name(i) for i in range(10)] == [f"part-0000{i}.csv" for i in range(10)]
    # the interleaving assertion: each part was written after the pages before it had
    # landed their checkpoints; a pass that buffered every page would read 10, 10, 10, ...
    assert bucket.landed == list(range(10))
    for i in range(10):
        assert bucket.objects[part_name(i)] == encode_part(tuple(COLUMNS), rows[i * 1000:(i + 1) * 1000])
    # a keyset source cannot tell a full last page from a middle one: page 10 reads nothing,
    # ends the pass and writes no part
    steps = memory_driver.step_list(job_id).steps
    assert [s.name for s in steps] == [f"page:{i}" for i in range(11)]
    assert steps[4].result == {"cursor": 4999, "rows": 5000, "tally": 5}     # a cursor and counts, no rows
    assert steps[-1].result == {"cursor": None, "rows": 10_000, "tally": 10}


def test_a_run_that_died_mid_export_resumes_and_rewrites_only_its_page_with_the_same_bytes(memory_driver):
    registry = xjobs.Registry()
    rows = table(4_500)
    reads: list = []
    bucket = Bucket(memory_driver)
    bucket.fail_at = {part_name(2)}
    handle = declare(registry, keyset(rows, reads), bucket, page=1000)
    [job_id] = enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    view = memory_driver.job_get(job_id)
    assert view.state == "completed" and view.attempt == 2
    assert reads == [None, 999, 1999, 1999, 2999, 3999]     # pages 0 and 1 were never read again
    assert bucket.puts == [part_name(i) for i in (0, 1, 2, 3, 4)]
    assert bucket.landed == [0, 1, 2, 3, 4]
    clean = Bucket()
    again_handle = declare(registry, keyset(rows), clean, name="again", page=1000)
    [again] = enqueue(again_handle, memory_driver, {})
    run_all(memory_driver, registry)
    assert memory_driver.job_get(again).state == "completed"
    assert clean.objects == bucket.objects


def test_a_checkpoint_forgotten_after_the_run_makes_its_pages_run_again_with_identical_bytes(memory_driver):
    registry = xjobs.Registry()
    rows = table(10_000)
    bucket = Bucket(memory_driver)
    handle = declare(registry, keyset(rows), bucket, page=1000)
    [job_id] = enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    first = dict(bucket.objects)
    # xjobsd jobs retry ID --from-step page:6: the checkpoint of page 6 (and those after it) is gone
    memory_driver.step_reopen(job_id, "page:6")
    run_all(memory_driver, registry)
    assert memory_driver.job_get(job_id).state == "completed"
    assert bucket.puts == [part_name(i) for i in range(10)] + [part_name(i) for i in range(6, 10)]
    assert bucket.landed[10:] == [6, 7, 8, 9]   # pages 0 to 5 replayed: their checkpoints stand
    assert bucket.objects == first          # the rewritten parts are the same objects, byte for byte


def test_an_export_that_found_nothing_leaves_one_header_part_and_an_empty_last_page_writes_none(memory_driver):
    registry = xjobs.Registry()
    empty, exact = Bucket(), Bucket()
    declare(registry, keyset([]), empty, name="empty")
    declare(registry, keyset(table(20)), exact, name="exact", page=10)   # pages of 10, 10, then 0 rows
    enqueue(registry.get("empty"), memory_driver, {})
    enqueue(registry.get("exact"), memory_driver, {})
    pacer = Pacer(make_worker(memory_driver, registry))
    pacer.until(lambda: pacer.totals()["completed"] == 2, advance_ms=100)
    assert empty.objects == {"part-00000.csv": b"id,name,amount\r\n"}
    assert exact.puts == ["part-00000.csv", "part-00001.csv"]


def test_a_page_past_max_part_bytes_is_dead_at_once_and_its_part_never_written(memory_driver):
    registry = xjobs.Registry()
    rows = table(30)
    rows[25]["name"] = "x" * 5000
    bucket = Bucket()
    handle = declare(registry, keyset(rows), bucket, page=10, max_part_bytes=4096)
    [job_id] = enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    view = memory_driver.job_get(job_id)
    assert view.state == "dead" and view.attempt == 1       # the same rows fail the same way: not retried
    assert "X_EXPORT_PART_TOO_LARGE" in (view.last_error or "")
    assert bucket.puts == ["part-00000.csv", "part-00001.csv"]


def test_a_directory_destination_per_input(memory_driver, tmp_path):
    registry = xjobs.Registry()
    handle = declare(registry, keyset(table(25)), lambda i: tmp_path / i["org"], page=10,
                     tenant=lambda i: i["org"])
    enqueue(handle, memory_driver, {"org": "acme"})
    run_all(memory_driver, registry)
    assert sorted(p.name for p in (tmp_path / "acme").iterdir()) == ["part-00000.csv", "part-00001.csv",
                                                                      "part-00002.csv"]
    assert (tmp_path / "acme" / "part-00002.csv").read_bytes().count(b"\r\n") == 6    # header + 5 rows


@pytest.mark.parametrize("tenant", ["none", lambda i: i["org"]])
def test_an_export_never_gets_the_cross_tenant_escape(memory_driver, tenant):
    registry = xjobs.Registry()
    tried: list = []

    def source(input, cursor, limit):
        run = xjobs.current()
        assert run is not None
        tried.append(run.tenant)
        with run.cross_tenant("read every org's orders"):
            return [], None
    handle = declare(registry, source, Bucket(), tenant=tenant)
    assert handle.cross_tenant is False and describe(registry)["jobs"][0]["cross_tenant"] is False
    [job_id] = enqueue(handle, memory_driver, {"org": "acme"})
    run_all(memory_driver, registry)
    view = memory_driver.job_get(job_id)
    assert view.state == "dead" and view.attempt == 1
    assert "X_TENANCY_CROSS_DENIED" in (view.last_error or "")
    assert tried == [None if tenant == "none" else "acme"]


def test_a_handle_granted_the_escape_after_declaration_is_still_refused(memory_driver):
    registry = xjobs.Registry()
    bucket = Bucket()
    handle = declare(registry, keyset(table(3)), bucket)
    handle.cross_tenant = True
    [job_id] = enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    assert "X_TENANCY_CROSS_DENIED" in (memory_driver.job_get(job_id).last_error or "")
    assert bucket.puts == []


def test_the_same_export_enqueued_twice_while_live_is_one_run(memory_driver):
    registry = xjobs.Registry()
    handle = declare(registry, keyset(table(3)), Bucket())
    first, second = (enqueue_many(handle, [{"day": "d1"}], driver=memory_driver)[0]
                     for _ in range(2))
    assert second.deduped and second.id == first.id
    other = enqueue_many(handle, [{"day": "d2"}], driver=memory_driver)[0]
    assert not other.deduped
    assert memory_driver.job_get(first.id).idempotency_key.startswith("export:orders:")


def test_two_exports_under_one_name_collide_and_one_declared_twice_is_one():
    registry = xjobs.Registry()
    source = keyset(table(3))
    declare(registry, source, Bucket())
    declare(registry, source, Bucket())          # a module imported twice declares it again
    def other_source(input, cursor, limit):
        return [], None
    with pytest.raises(xjobs.XJobsError) as caught:
        declare(registry, other_source, Bucket())
    assert caught.value.code == "X_JOB_DUPLICATE"


@pytest.mark.parametrize("option, value", [
    ("page", 0), ("page", -1), ("page", 2.5), ("page", True), ("page", math.nan), ("page", math.inf),
    ("page", "1000"), ("page", 1_000_001), ("max_part_bytes", 0), ("max_part_bytes", True),
    ("max_part_bytes", math.nan), ("max_part_bytes", -5), ("max_part_bytes", 1.5),
    ("format", "xlsx"), ("format", None), ("name", ""), ("name", "bad\nname"), ("source", "rows"),
    ("columns", []), ("columns", "id"), ("idempotency_key", "k"), ("to", None), ("to", 3),
])
def test_bad_knobs_are_refused_at_declaration(option, value):
    registry = xjobs.Registry()
    options = {"name": "orders", "source": keyset([]), "columns": COLUMNS, "to": Bucket(), "tenant": "none",
               "registry": registry, option: value}
    with pytest.raises(InvalidOption) as caught:
        xjobs.export_rows(**options)
    assert caught.value.code == "X_INVALID_OPTION" and caught.value.option == option
    assert registry.jobs() == []


def test_an_export_requires_a_tenant_like_every_job():
    with pytest.raises(xjobs.XJobsError) as caught:
        xjobs.export_rows(name="orders", source=keyset([]), columns=COLUMNS, to=Bucket(),
                          tenant=None,  # type: ignore[arg-type]
                          registry=xjobs.Registry())
    assert caught.value.code == "X_JOB_TENANT_REQUIRED"


def test_a_source_answering_the_wrong_shape_is_dead_at_once(memory_driver):
    registry = xjobs.Registry()
    handle = declare(registry, lambda input, cursor, limit: {"rows": []}, Bucket())
    [job_id] = enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    view = memory_driver.job_get(job_id)
    assert view.state == "dead" and view.attempt == 1 and "X_PAGE_SOURCE_INVALID" in (view.last_error or "")


def test_the_guide_s_way_of_testing_an_export_runs():
    from xjobs import testing

    bucket = Bucket()
    saved = xjobs.REGISTRY.snapshot()
    xjobs.REGISTRY.clear()
    try:
        with testing.memory_queue():
            xjobs.export_rows(name="guide_export", source=keyset(table(5)), columns=COLUMNS, to=bucket,
                              tenant="none", page=2).enqueue({})
            assert testing.run_until_idle("default").completed == 1
    finally:
        xjobs.REGISTRY.restore(saved)
    assert bucket.puts == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]


def test_the_interleaving_assertion_tells_a_buffering_pass_from_a_streaming_one(memory_driver):
    """What the streaming proof would read of a pass that kept every page and wrote at the end:
    a flat run of the final count, never 0, 1, 2, ..."""
    from xjobs.factories.paging import in_pages

    registry = xjobs.Registry()
    bucket = Bucket(memory_driver)
    rows = table(30)

    def buffering(ctx, input):
        kept: list = []
        in_pages(ctx, lambda cursor, limit: keyset(rows)(input, cursor, limit),
                 lambda page, index: kept.append(page), limit=10, prefix="page")
        for index, page in enumerate(kept):
            if page:
                bucket.put(part_name(index), encode_part(tuple(COLUMNS), page))
    handle = xjobs.job(registry=registry, queue="q", idempotency_key=lambda i: "k", tenant="none")(buffering)
    enqueue(handle, memory_driver, {})
    run_all(memory_driver, registry)
    assert bucket.landed == [4, 4, 4] != list(range(3))
