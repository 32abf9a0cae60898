"""An export's part bytes (``xjobs/factories/csv_parts.py``) and where they go
(``xjobs/factories/part_store.py``): RFC 4180, the formula guard on strings only, the app's
columns, the size bound refused before writing, and the store seam (fsspec or an app's put)."""

from __future__ import annotations

import csv
import datetime
import io
import sys
import uuid
from decimal import Decimal

import fsspec
import pytest

from xjobs.errors import InvalidOption
from xjobs.factories.refusals import ExportPartTooLarge, ExportRowInvalid, ExportStorageMissing
from xjobs.factories.csv_parts import FORMULA_LEADS, check_columns, encode_part, guard
from xjobs.factories.part_store import FsspecStore, PartStore, resolver, store_for


def parse(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline=""), strict=True))


def test_records_end_in_crlf_and_only_fields_that_need_it_are_quoted():
    data = encode_part(("a", "b"), [("plain", "x,y"), ('say "hi"', "two\nlines"), ("lone\rcr", "")])
    assert data == (b'a,b\r\n'
                    b'plain,"x,y"\r\n'
                    b'"say ""hi""","two\nlines"\r\n'
                    b'"lone\rcr",\r\n')
    assert parse(data) == [["a", "b"], ["plain", "x,y"], ['say "hi"', "two\nlines"], ["lone\rcr", ""]]


@pytest.mark.parametrize("lead", FORMULA_LEADS)
def test_a_string_leading_with_a_formula_character_is_read_as_text(lead):
    text = f"{lead}HYPERLINK(\"http://evil\",\"x\")"
    [_, [field]] = parse(encode_part(("name",), [{"name": text}]))
    assert field == "'" + text


def test_the_guard_is_on_strings_only_and_numbers_are_untouched():
    row = {"refund": -12, "ratio": -0.5, "exact": Decimal("-2.50"), "note": "-12", "sum": "=1+1",
           "safe": "a=b", "big": 10**20}
    [header, values] = parse(encode_part(tuple(row), [row]))
    assert header == list(row)
    assert values == ["-12", "-0.5", "-2.50", "'-12", "'=1+1", "a=b", "100000000000000000000"]
    assert guard("plain") == "plain" and guard("") == ""


def test_the_header_is_guarded_like_any_string():
    assert parse(encode_part(("=cmd", "ok"), []))[0] == ["'=cmd", "ok"]


def test_cells_of_every_written_kind():
    row = (None, True, False, 1.25, datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
           datetime.date(2026, 1, 2), datetime.time(3, 4), uuid.UUID(int=1), "héllo ✓")
    columns = tuple(f"c{i}" for i in range(len(row)))
    [_, values] = parse(encode_part(columns, [row]))
    assert values == ["", "true", "false", "1.25", "2026-01-02T03:04:05+00:00", "2026-01-02", "03:04:00",
                      "00000000-0000-0000-0000-000000000001", "héllo ✓"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), Decimal("NaN"), b"bytes", object(), [1]])
def test_a_value_with_no_csv_form_is_refused_naming_its_place(value):
    with pytest.raises(ExportRowInvalid, match=r"page 3, row 1, column 'b'") as caught:
        encode_part(("a", "b"), [(1, 2), (1, value)], page=3)
    assert caught.value.code == "X_EXPORT_ROW_INVALID"


def test_a_string_that_is_not_valid_unicode_is_refused_naming_its_row():
    with pytest.raises(ExportRowInvalid, match="page 0, row 1"):
        encode_part(("a",), [("fine",), ("bad\udcff",)])


@pytest.mark.parametrize("row, why", [({"a": 1}, "no value for column"), ((1,), "1 values for 2 columns"),
                                      ((1, 2, 3), "3 values"), ("ab", "mapping or a sequence"),
                                      (7, "mapping or a sequence")])
def test_a_row_not_shaped_like_the_columns_is_refused(row, why):
    with pytest.raises(ExportRowInvalid, match=why):
        encode_part(("a", "b"), [row])


def test_the_columns_are_the_apps_and_extra_keys_stay_home():
    [_, values] = parse(encode_part(("id", "email"), [{"id": 1, "email": "a@x", "password_hash": "secret"}]))
    assert values == ["1", "a@x"]


@pytest.mark.parametrize("columns", ["id", [], ["a", "a"], ["a", ""], ["a", 3], None, ["bad\nname"]])
def test_columns_are_a_list_of_distinct_names(columns):
    with pytest.raises(InvalidOption) as caught:
        check_columns(columns)
    assert caught.value.option == "columns"


def test_max_bytes_bounds_the_encoded_part_and_refuses_before_anything_is_returned():
    rows = [("x" * 10,)] * 10        # "c\r\n" then ten rows of 12 bytes: 123 bytes
    assert len(encode_part(("c",), rows, max_bytes=123)) == 123
    with pytest.raises(ExportPartTooLarge, match="page 4") as caught:
        encode_part(("c",), rows, max_bytes=122, page=4)
    assert caught.value.code == "X_EXPORT_PART_TOO_LARGE" and caught.value.details["max_part_bytes"] == 122


def test_the_bound_counts_bytes_not_characters():
    [row] = [("✓" * 10,)]            # 30 bytes of UTF-8 for 10 characters
    with pytest.raises(ExportPartTooLarge):
        encode_part(("c",), [row], max_bytes=20)


# -- the store --------------------------------------------------------------------------------

class Bucket:
    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data


def test_an_apps_object_with_put_is_a_store_and_a_callable_picks_one_per_input(tmp_path):
    bucket = Bucket()
    assert isinstance(bucket, PartStore) and store_for(bucket) is bucket
    assert resolver(bucket)({}) is bucket
    per_run = resolver(lambda i: str(tmp_path / i["org"]))
    store = per_run({"org": "acme"})
    store.put("part-00000.csv", b"a\r\n")
    assert (tmp_path / "acme" / "part-00000.csv").read_bytes() == b"a\r\n"


def test_a_local_part_is_replaced_whole_and_leaves_no_temporary_file(tmp_path):
    store = store_for(tmp_path / "out")
    store.put("part-00000.csv", b"first")
    store.put("part-00000.csv", b"second")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["part-00000.csv"]
    assert (tmp_path / "out" / "part-00000.csv").read_bytes() == b"second"


def test_a_url_goes_through_fsspec():
    store = store_for("memory://exports-test/orders")
    assert isinstance(store, FsspecStore)
    store.put("part-00001.csv", b"id\r\n1\r\n")
    assert fsspec.filesystem("memory").cat_file("/exports-test/orders/part-00001.csv") == b"id\r\n1\r\n"


@pytest.mark.parametrize("to", [None, "", "  ", 42, b"bytes", "nul\x00path"])
def test_a_destination_that_names_nothing_is_refused(to):
    with pytest.raises(InvalidOption) as caught:
        resolver(to)
    assert caught.value.option == "to"


def test_an_unknown_scheme_or_a_missing_filesystem_is_refused_at_declaration(monkeypatch):
    with pytest.raises((InvalidOption, ExportStorageMissing)):
        store_for("nosuchscheme://bucket/x")
    monkeypatch.setitem(sys.modules, "fsspec", None)     # what an environment without the extra sees
    with pytest.raises(ExportStorageMissing, match=r"xjobsd\[export\]") as caught:
        store_for("s3://bucket/prefix")
    assert caught.value.code == "X_EXPORT_STORAGE_MISSING"


def test_a_fixed_url_is_checked_at_declaration_and_opened_only_at_the_first_part():
    store = resolver("memory://exports-lazy/x")({})
    assert isinstance(store, FsspecStore) and store._fs is None      # no client made before a fork
    store.put("part-00000.csv", b"a\r\n")
    assert store._fs is not None


def test_an_attribute_named_put_that_is_not_callable_is_no_store():
    class Odd:
        put = "not a method"
    with pytest.raises(InvalidOption):
        store_for(Odd())
