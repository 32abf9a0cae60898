"""One page of rows as the bytes of one CSV part: RFC 4180 quoting and the formula guard.

- **RFC 4180.** Comma-separated, CRLF after every record (the last one too), a field quoted
  with ``"`` only when it holds a comma, a quote, CR or LF, and a quote inside a field
  doubled. UTF-8 without a byte-order mark.
- **A header row in every part.** Each part is a file somebody opens on its own (a
  spreadsheet, ``COPY ... CSV HEADER``, a loader that takes one object), so each one names its
  columns; whoever concatenates parts skips the first line of every part after the first.
- **The formula guard, on strings only.** Spreadsheets evaluate a cell whose text begins with
  ``=``, ``+``, ``-``, ``@``, TAB or CR as a formula, so an exported ``=HYPERLINK(...)`` typed
  into a name field runs on the reader's machine. Such a string gets a leading ``'``: every
  spreadsheet reads an apostrophe there as "this cell is text" and does not show it, so the
  reader sees the value as typed rather than a value with a visible space or tab in front (the
  other common fixes) — and a program reading the file sees exactly one extra leading character
  to strip. Numbers are never touched: guarding every leading ``-`` would turn a refund column
  into text, and a number cannot carry a formula. The header row is guarded like any string.
- **Cells.** ``None`` is an empty field; ``str`` is guarded; ``bool`` is ``true``/``false``;
  ``int``, ``Decimal`` and finite ``float`` are written as Python prints them (a float's
  shortest round-trip form); dates, times and UUIDs in ISO form. Anything else, and a NaN or
  infinite float (no spreadsheet or loader reads those alike), or a string that is not valid
  Unicode (a lone surrogate), is refused with ``X_EXPORT_ROW_INVALID`` naming the row, rather
  than written as some ``repr``.
- **Rows.** A mapping is read by the column names (a missing column is refused, never written
  empty: that is a typo or a changed query, not data); a sequence (a database row tuple) by
  position, and it must have exactly one value per column.
- **The size bound.** ``max_part_bytes`` bounds the encoded part; the encoder stops at the
  first row past it and refuses with ``X_EXPORT_PART_TOO_LARGE``, before anything is written.
"""

from __future__ import annotations

import csv
import datetime
import io
import math
import uuid
from decimal import Decimal
from typing import Iterable, Mapping, Sequence

from ..errors import InvalidOption
from ..options import plain_name
from .refusals import ExportPartTooLarge, ExportRowInvalid

FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
GUARD = "'"
_MAX_COLUMNS = 4096


class Rfc4180(csv.Dialect):
    """The csv module's dialect for RFC 4180 (``csv.excel`` differs only by being mutable)."""

    delimiter = ","
    quotechar = '"'
    doublequote = True
    escapechar = None
    lineterminator = "\r\n"
    quoting = csv.QUOTE_MINIMAL
    skipinitialspace = False
    strict = True


def guard(text: str) -> str:
    """``text`` as a spreadsheet shows it as text: a leading formula character gets a ``'``."""
    return GUARD + text if text.startswith(FORMULA_LEADS) else text


def check_columns(columns: object) -> tuple[str, ...]:
    """The app's columns: a non-empty sequence of distinct names (refused with ``X_INVALID_OPTION``)."""
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise InvalidOption("columns", f"must be a list of column names, got {type(columns).__name__}")
    if not columns:
        raise InvalidOption("columns", "must name at least one column")
    if len(columns) > _MAX_COLUMNS:
        raise InvalidOption("columns", f"at most {_MAX_COLUMNS} columns")
    names = tuple(plain_name(column, "columns") for column in columns)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidOption("columns", f"{name!r} is named twice")
        seen.add(name)
    return names


def cell(value: object, where: str) -> str:
    """One value as its field's text (see the module doc); ``where`` names it in a refusal."""
    if value is None:
        return ""
    if isinstance(value, str):
        return guard(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExportRowInvalid(f"{where}: {value!r} is not a finite number; no reader agrees on it")
        return repr(value)
    if isinstance(value, (int, Decimal)):
        if isinstance(value, Decimal) and not value.is_finite():
            raise ExportRowInvalid(f"{where}: {value!r} is not a finite number; no reader agrees on it")
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):    # datetime is a date
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise ExportRowInvalid(f"{where}: a {type(value).__name__} has no CSV form; convert it in the "
                           "source (str, numbers, bool, None, dates, times and UUIDs are written)")


def _values(row: object, columns: tuple[str, ...], where: str) -> Iterable[object]:
    if isinstance(row, Mapping):
        missing = [c for c in columns if c not in row]
        if missing:
            raise ExportRowInvalid(f"{where}: no value for column(s) {', '.join(map(repr, missing))}")
        return (row[c] for c in columns)
    if isinstance(row, Sequence) and not isinstance(row, (str, bytes)):
        if len(row) != len(columns):
            raise ExportRowInvalid(f"{where}: {len(row)} values for {len(columns)} columns")
        return row
    raise ExportRowInvalid(f"{where}: a row is a mapping or a sequence, got {type(row).__name__}")


def encode_part(columns: tuple[str, ...], rows: Iterable[object], *,
                max_bytes: int | None = None, page: int = 0) -> bytes:
    """The header and ``rows`` as one part's bytes, refused past ``max_bytes``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, dialect=Rfc4180)
    chunks: list[bytes] = []
    size = 0

    def add(fields: list[str], where: str) -> None:
        nonlocal size
        writer.writerow(fields)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        try:
            chunk = text.encode("utf-8")
        except UnicodeEncodeError as exc:    # a lone surrogate, from bytes decoded with surrogateescape
            raise ExportRowInvalid(f"{where}: a string that is not valid Unicode ({exc.reason} at "
                                   f"{exc.start})") from None
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise ExportPartTooLarge(f"page {page}: the part passed max_part_bytes={max_bytes} at "
                                     f"{len(chunks)} row(s); nothing was written (lower page= or "
                                     "raise max_part_bytes=)", page=page, max_part_bytes=max_bytes)
        chunks.append(chunk)

    add([guard(c) for c in columns], f"page {page}, the header")
    for number, row in enumerate(rows):
        where = f"page {page}, row {number}"
        add([cell(v, f"{where}, column {c!r}") for c, v in zip(columns, _values(row, columns, where))], where)
    return b"".join(chunks)


__all__ = ["FORMULA_LEADS", "GUARD", "Rfc4180", "cell", "check_columns", "encode_part", "guard"]
