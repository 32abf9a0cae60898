"""Paging a source one durable step per page: the loop ``backfill()`` and ``export_rows()`` share.

::

    result = in_pages(ctx, source, work, limit=1000, prefix="batch", before=pacer.wait)

- ``source(cursor, limit) -> (rows, next_cursor)``: one page of at most ``limit`` rows read
  from ``cursor`` (``None`` on the first page). ``rows`` is a list (or tuple); ``next_cursor``
  is a JSON value saying where the next page begins, and ``None`` is the end marker: the page
  just read was the last. The source is always handed the cursor as its checkpoint stored it
  (a tuple comes back a list, a datetime an ISO string), on the first attempt as on a resume.
  An empty page ends the pass too, so a source that keeps answering a cursor with no rows
  cannot loop for ever.
- ``work(rows, page) -> int | None``: what the caller does with the page (``page`` is its
  0-based index). It runs inside the page's ``ctx.step.run``, before the checkpoint is written,
  so it is AT LEAST ONCE: an attempt killed between the two hands the page to the next attempt.
  What it answers (a whole number >= 0, ``None`` counting 0) is added to ``tally``.
- ``before()``, optional, runs first inside the step body (a pacer's wait): a replayed page,
  which runs no body, never pays it.
- ``prefix``: the steps are named ``<prefix>:<index>``, positional, so the next attempt mints
  the names the last one wrote; the per-page work is handed no ``ctx.step`` of its own.

Each step records a checkpoint ``{"cursor": next_cursor, "rows": R, "tally": T}`` and never the
page: ``R`` is the rows read so far and ``T`` the tally so far, both absolute. A checkpoint read
back on a replay is checked, not trusted (``X_PAGE_CHECKPOINT_INVALID``): a JSON object whose
``cursor`` key is present (absent is not ``None``, which would end the pass, or reopen the
source at the top if read as a start) and whose counts are whole and >= 0. The next page always
opens at the latest checkpoint's cursor: where the cursor the live loop last read disagrees
with it (a step re-opened by ``jobs retry --from-step``, or a source that moved since the step
was recorded), the iteration is rebuilt from the checkpoint and ``rebuilds`` counts it.

``on_page(progress)``, optional, is called after each step with a ``PageProgress``; its ``ran``
is set inside the step body, the one place that can tell a page that ran from a replayed one.

The answer is a ``PagingResult``: the final cursor, the absolute counts, how many pages ran
in this attempt and how many were replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral
from typing import Callable, Protocol, Sequence, Union

from ..errors import InvalidOption
from ..options import finite_count
from .refusals import PageCheckpointInvalid, PageSourceInvalid

Json = Union[None, bool, int, float, str, Sequence["Json"], dict[str, "Json"]]
Rows = Sequence[object]
Source = Callable[[Json, int], "tuple[Rows, Json]"]
Work = Callable[[Rows, int], Union[int, None]]



class Steps(Protocol):
    def run(self, name: str, fn: Callable[[], object]) -> object: ...


class StepsOf(Protocol):
    """What the loop needs of a run: ``ctx.step`` (a ``Ctx`` is one)."""

    @property
    def step(self) -> Steps: ...


MAX_LIMIT = 1_000_000
_UNREAD = object()


@dataclass(frozen=True, slots=True)
class PageProgress:
    """One page, after its step: ``ran`` is False for a replay (its work did not run now)."""

    index: int
    cursor: Json
    rows: int
    tally: int
    ran: bool


@dataclass(frozen=True, slots=True)
class PagingResult:
    cursor: Json
    rows: int
    tally: int
    pages: int          # every page of the pass, run now or replayed
    ran: int            # the pages whose work ran in this attempt
    replayed: int
    rebuilds: int


def checkpoint_of(value: object, name: str) -> tuple[Json, int, int]:
    """A recorded checkpoint, checked: (cursor, rows, tally)."""
    if not isinstance(value, dict):
        raise PageCheckpointInvalid(f"step {name!r} recorded {type(value).__name__}, not a checkpoint "
                                "object", step=name)
    if "cursor" not in value:
        raise PageCheckpointInvalid(f"step {name!r} recorded no cursor; reading it as None would end "
                                "or restart the pass", step=name)
    counts = []
    for key in ("rows", "tally"):
        count = value.get(key)
        if isinstance(count, bool) or not isinstance(count, Integral) or int(count) < 0:
            raise PageCheckpointInvalid(f"step {name!r} recorded {key}={count!r}; a count is a whole "
                                    "number >= 0", step=name)
        counts.append(int(count))
    return value["cursor"], counts[0], counts[1]


def _page(answer: object) -> tuple[Rows, Json]:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise PageSourceInvalid(f"source must answer (rows, next_cursor), got {type(answer).__name__}")
    rows, cursor = answer
    if not isinstance(rows, (list, tuple)):
        raise PageSourceInvalid(f"source's rows must be a list, got {type(rows).__name__}")
    return rows, cursor


def _tally(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 0:
        raise InvalidOption("paging.work", f"answers a whole number >= 0 or None, got {value!r}")
    return int(value)


def in_pages(ctx: StepsOf, source: Source, work: Work, *, limit: int, prefix: str = "batch",
             before: Callable[[], None] | None = None,
             on_page: Callable[[PageProgress], None] | None = None) -> PagingResult:
    """Walk ``source`` one page per ``ctx.step.run`` (see the module's docstring)."""
    limit = finite_count(limit, "paging.limit", minimum=1, maximum=MAX_LIMIT)
    if not callable(source) or not callable(work):
        raise InvalidOption("paging", "source and work must be callables")
    cursor: Json = None
    rows = tally = index = ran_pages = rebuilds = 0
    live: object = _UNREAD      # where the last page this attempt read left the source
    while True:
        name = f"{prefix}:{index}"
        ran: list[bool] = []
        start, rows_before, tally_before, page_index = cursor, rows, tally, index

        def body() -> dict[str, Json]:
            nonlocal rebuilds
            ran.append(True)        # the replay/run flag: only a body that runs sets it
            if live is not _UNREAD and live != start:
                rebuilds += 1       # replayed pages moved the cursor off the live read: reopen
            if before is not None:
                before()
            page_rows, next_cursor = _page(source(start, limit))
            added = _tally(work(page_rows, page_index))
            return {"cursor": next_cursor if page_rows else None,
                    "rows": rows_before + len(page_rows), "tally": tally_before + added}

        recorded = ctx.step.run(name, body)
        cursor, rows, tally = checkpoint_of(recorded, name)
        if ran:
            ran_pages += 1
            live = cursor
        if on_page is not None:
            on_page(PageProgress(index, cursor, rows, tally, bool(ran)))
        index += 1
        if cursor is None:
            return PagingResult(cursor, rows, tally, index, ran_pages, index - ran_pages, rebuilds)


__all__ = ["PageProgress", "PagingResult", "StepsOf",
           "checkpoint_of", "in_pages"]
