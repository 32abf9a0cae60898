"""``export_rows()``: rows out of the app's database into parts in storage, one part per page.

::

    orders_export = xjobs.export_rows(
        name="orders_export",
        source=lambda input, cursor, limit: orders_after(input["org"], cursor, limit),
        columns=["id", "placed_at", "customer", "total"],
        to=lambda input: f"s3://exports/{input['org']}/orders",
        tenant=lambda input: input["org"],
        page=1000, max_part_bytes=8 * 1024 * 1024)
    orders_export.enqueue({"org": "acme"})

It answers an ordinary ``JobHandle`` built by ``job()``, so enqueue, retries, cancel, dead
letters, the manifest and both operator surfaces treat an export like any other job. Its body
is the shared paging loop (``paging.py``): one ``ctx.step.run`` per page, whose checkpoint is
the cursor and two counts (rows read, parts written), never the rows.

- ``source(input, cursor, limit) -> (rows, next_cursor)``: backfill's source shape with the
  job's input first, because one declaration serves many runs (a tenant, a day). ``cursor``
  is None on the first page; a ``next_cursor`` of None (or an empty page) ends the export.
  Rows are mappings read by column name or sequences read by position (``csv_parts.py``).
- **One part per page, named by the page's index**: ``part-00000.csv``, ``part-00001.csv``,
  ... under ``to``. The part is written inside the page's step, before its checkpoint, so a
  page runs at least once; a page run again writes the same name with the same bytes (the
  source answering the same rows for the same cursor), so a rerun can only replace a part,
  never add a duplicate or append to one. Nothing accumulates across pages: each page is
  encoded, written and dropped before the next is read.
- An empty page writes no part, except page 0: an export that found no rows still leaves one
  part holding the header, so "ran and found nothing" differs from "never ran".
- ``page`` (rows per page, default 1000) is a whole number in 1..1,000,000; ``max_part_bytes``,
  when given, a whole number >= 1 bounding one encoded part (``X_EXPORT_PART_TOO_LARGE``
  before it is written). ``format`` is ``"csv"``, the one format so far.
- **No cross-tenant escape.** An export reads every row it is given into an object somebody
  can download, so its job never declares the capability: ``ctx.cross_tenant`` anywhere in an
  export's run (its source, its store) is ``X_TENANCY_CROSS_DENIED``, ``tenant="none"``
  included. ``tenant="none"`` is for tables with no tenant column at all.
- The refusals the same code and rows would give again on every attempt
  (``X_TENANCY_CROSS_DENIED``, ``X_EXPORT_PART_TOO_LARGE``, ``X_EXPORT_ROW_INVALID``,
  ``X_EXPORT_STORAGE_MISSING``, ``X_PAGE_SOURCE_INVALID``) dead-letter the run at once; anything else the source or the
  store raises follows ``retry``.
- The idempotency key defaults to ``export:<name>:<sha256 of the canonical input>``: enqueueing
  the same export again while it is live answers the live one.
- The run's result is ``{"parts": P, "rows": R, "pages": N}``; ``ctx.progress`` reports rows
  read after each page.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Callable, Sequence

import orjson

from ..errors import CrossTenantDenied, InvalidOption
from ..options import finite_count, plain_name
from ..registry import REGISTRY, JobHandle, Registry, job
from ..retry import Retry
from .csv_parts import check_columns, encode_part
from .declarations import one_declaration
from .paging import MAX_LIMIT, Json, PageProgress, Rows, in_pages
from .part_store import resolver
from .refusals import ExportPartTooLarge, ExportRowInvalid, ExportStorageMissing, PageSourceInvalid

if TYPE_CHECKING:
    from ..context import Ctx

# source(input, cursor, limit) -> (rows, next_cursor); the input is the app's own JSON shape
ExportSource = Callable[[Any, Any, int], "tuple[Rows, Json]"]

FORMATS = {"csv": "csv"}      # format -> the parts' file extension
DEFAULT_PAGE = 1000
MAX_PART_BYTES = 2**40        # a terabyte: past it, a bound is a typo, not a bound
PAGE_STEP = "page"            # the steps are page:0, page:1, ...
# what the same code and the same rows answer again on every attempt: dead at once, not retried
REFUSALS = (CrossTenantDenied, ExportPartTooLarge, ExportRowInvalid, ExportStorageMissing, PageSourceInvalid)


def part_name(index: int, extension: str = "csv") -> str:
    """The key of page ``index``'s part (five digits: names sort in page order to 100,000 parts)."""
    return f"part-{index:05d}.{extension}"


def default_key(name: str) -> Callable[[object], str]:
    def key(input: object) -> str:
        canonical = orjson.dumps(input, option=orjson.OPT_SORT_KEYS)
        return f"export:{name}:{hashlib.sha256(canonical).hexdigest()[:32]}"
    return key


def export_rows(*, name: str, source: ExportSource, columns: Sequence[str], to: object,
                tenant: "Callable[[Any], object] | str", format: str = "csv", page: int = DEFAULT_PAGE,
                max_part_bytes: int | None = None, queue: str = "default",
                idempotency_key: Callable[[Any], str] | None = None, retry: Retry | None = None,
                timeout: object = None, registry: Registry | None = None) -> JobHandle:
    """Declare a job that writes ``source``'s rows to ``to`` as one CSV part per page; answers
    its ``JobHandle`` (enqueue it with the input ``source``, ``to`` and ``tenant`` read).

    ``source(input, cursor, limit) -> (rows, next_cursor)`` reads one page after ``cursor``
    (None first; a ``next_cursor`` of None or an empty page ends it). ``columns`` are the
    names written, in order. ``to`` is a path or fsspec URL, an object with
    ``put(key, data)``, or a callable of the input answering one. Page ``n`` is written to
    ``part-NNNNN.csv`` inside its durable step, so a page run again rewrites the same part
    with the same bytes. ``page`` rows per page (1..1,000,000); ``max_part_bytes`` bounds one
    encoded part (``X_EXPORT_PART_TOO_LARGE``, before writing). An export's run never gets
    ``ctx.cross_tenant`` (``X_TENANCY_CROSS_DENIED``), whatever its ``tenant``. The guide:
    docs/guides/export.md."""
    name = plain_name(name, "name")
    if not callable(source):
        raise InvalidOption("source", "must be a callable: source(input, cursor, limit) -> (rows, next_cursor)")
    names = check_columns(columns)
    if not isinstance(format, str) or format not in FORMATS:
        raise InvalidOption("format", f"must be one of {', '.join(sorted(FORMATS))}, got {format!r}")
    extension = FORMATS[format]
    limit = finite_count(page, "page", minimum=1, maximum=MAX_LIMIT)
    bound = (None if max_part_bytes is None else
             finite_count(max_part_bytes, "max_part_bytes", minimum=1, maximum=MAX_PART_BYTES))
    store_of = resolver(to)
    if idempotency_key is not None and not callable(idempotency_key):
        raise InvalidOption("idempotency_key", "must be a callable taking the input and returning a string")
    key = idempotency_key if idempotency_key is not None else default_key(name)

    def export(ctx: "Ctx", input: object) -> dict[str, int]:
        if handle.cross_tenant:    # the declaration says False; a handle changed after is refused
            raise CrossTenantDenied(f"export {name!r}: an export never crosses tenants")
        store = store_of(input)

        def read(cursor: Json, size: int) -> "tuple[Rows, Json]":
            return source(input, cursor, size)

        def write(rows: Sequence[object], index: int) -> int:
            if not rows and index > 0:
                return 0
            store.put(part_name(index, extension), encode_part(names, rows, max_bytes=bound, page=index))
            return 1

        def progress(report: PageProgress) -> None:
            ctx.progress(report.rows, None, f"{report.tally} part(s) written")
        result = in_pages(ctx, read, write, limit=limit, prefix=PAGE_STEP, on_page=progress)
        return {"parts": result.tally, "rows": result.rows, "pages": result.pages}

    # every export's body is this one function: two declarations are one when the app's source is
    one_declaration(registry if registry is not None else REGISTRY, name, export, "export_rows", source)
    export.__qualname__ = f"export_rows[{name}]"
    export.__doc__ = f"export_rows(name={name!r}): {', '.join(names)} in pages of {limit} to parts"
    handle = job(queue=queue, name=name, idempotency_key=key, tenant=tenant, retry=retry,
                 timeout=timeout, terminal_on=REFUSALS, cross_tenant=False, registry=registry)(export)
    return handle


__all__ = ["DEFAULT_PAGE", "FORMATS", "export_rows", "part_name"]
