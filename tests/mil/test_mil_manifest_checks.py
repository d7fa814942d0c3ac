"""The manifest schema's building blocks, one by one, with the exact messages they give.

The schema (anec/mil/manifest.py) is assembled from small checkers when the
module is imported; the artifact tests exercise that assembled schema. These
tests build the checkers themselves, so each one's bounds and wording are held
by a test of its own (values shown shortened, bounds written as powers of two).
"""

from __future__ import annotations

import json

import pytest

from anec.diagnostics import ArtifactError
from anec.mil import beneath, manifest as m


def bad(check, value, path="f"):
    with pytest.raises(m._Bad) as e:
        check(value, path)
    return e.value


def test_a_shape_is_a_bounded_list_of_bounded_dims():
    assert m.shape()([1, 2, 3], "s") == [1, 2, 3]
    assert m.shape(0)([0, 4], "s") == [0, 4]
    assert m.shape()([], "s") == []
    e = bad(m.shape(), [3, 0], "io.shape")
    assert (e.path, e.expected, e.got) == ("io.shape[1]", "a dimension in [1, 2^31)", 0)
    e = bad(m.shape(2), [1])
    assert (e.path, e.expected) == ("f[0]", "a dimension in [2, 2^31)")
    e = bad(m.shape(), [m.MAX_DIM + 1])
    assert e.expected == "a dimension in [1, 2^31)" and e.got == 1 << 31
    assert m.shape()([m.MAX_DIM], "s") == [m.MAX_DIM]
    e = bad(m.shape(), [1] * (m.MAX_RANK + 1))
    assert (e.path, e.expected, e.got, e.show_got) == ("f", "an array of 0 to 8 items", "9 items", False)
    assert m.shape()([1] * m.MAX_RANK, "s") == [1] * 8
    e = bad(m.shape(), "1x2", "io.shape")
    assert (e.path, e.expected) == ("io.shape", "an array")


def test_a_shape_is_bounded_by_its_element_count():
    assert m.shape()([1 << 17, 1 << 17], "s") == [1 << 17, 1 << 17]  # exactly 2^34 elements
    e = bad(m.shape(), [1 << 17, (1 << 17) + 1], "w.shape")
    assert (e.path, e.expected, e.got) == ("w.shape", "a shape of at most 2^34 elements", [1 << 17, (1 << 17) + 1])


def test_nullable_passes_values_through_its_check_and_keeps_none():
    check = m.nullable(m.integer(0, 3))
    assert check(None, "x") is None
    assert check(2, "x") == 2
    e = bad(check, 7, "a.axis")
    assert (e.path, e.expected, e.got) == ("a.axis", "an integer in [0, 3]", 7)


@pytest.mark.parametrize("n,text", [
    (64, "64"), (1 << 20, "1048576"), ((1 << 20) + 1, "1048577"), (1 << 21, "2^21"), (1 << 40, "2^40"),
    ((1 << 40) - 1, str((1 << 40) - 1)), (3 << 30, str(3 << 30)), (-(1 << 40), str(-(1 << 40))),
])
def test_large_powers_of_two_are_written_as_powers(n, text):
    assert m._bound(n) == text


def test_integer_bounds_read_as_powers_in_messages():
    e = bad(m.integer(64, 1 << 62), "64", "weights[0].offset")
    assert e.expected == "an integer in [64, 2^62]"


@pytest.mark.parametrize("value,shown", [
    ("abc", '"abc"'),
    ("x" * 60, json.dumps("x" * 60)[:57] + "..."),
    ("x" * 58, json.dumps("x" * 58)),                     # 60 characters with the quotes: whole
    ("x" * 59, json.dumps("x" * 59)[:57] + "..."),        # 61: shortened to 60
    (7, "7"),
    (None, "None"),
    ([1, 2], "[1, 2]"),
    ({"a": 1}, '{"a": 1}'),
    ([[[1]]], "a JSON array of 1 items"),                  # deeper than 2: not dumped
    ({"a": {"b": {"c": 1}}}, "a JSON object of 1 items"),
    ([[1]], "[[1]]"),                                      # depth 2: dumped
    (list(range(30)), "a JSON array of 30 items"),         # dump longer than 60
    (list(range(17)), json.dumps(list(range(17)))),        # 59 characters: dumped
    (["a" * 56], json.dumps(["a" * 56])),                  # 60 characters: dumped
    (["a" * 57], "a JSON array of 1 items"),               # 61 characters: described
])
def test_manifest_values_are_shown_short(value, shown):
    assert m._show(value) == shown
    assert len(m._show(value)) <= 60


def test_a_missing_field_is_named_without_a_value():
    e = bad(m.obj({"file": m.rel_path()}), {}, "mil")
    assert (e.path, e.expected, e.show_got) == ("mil.file", "a value (the field is missing)", False)
    assert str(e) == "mil.file"


def test_validation_messages_put_the_pieces_together():
    with pytest.raises(ArtifactError) as e:
        m.validate_manifest({"format": "anec-artifact/1", "func": "f"}, "out/f/manifest.json")
    assert e.value.args[0] == "out/f/manifest.json: field 'mil': expected a value (the field is missing)"


def test_numbers_beyond_the_float_range_are_refused_with_the_text_shortened():
    text = "1" + "0" * 400
    with pytest.raises(ArtifactError, match=r"number 1e999 is out of range"):
        m.parse_json(b'{"a": 1e999}', "m.json")
    with pytest.raises(ArtifactError) as e:
        m.parse_json(('{"a": ' + text + '.5}').encode(), "m.json")
    assert f"number {(text + '.5')[:40]} is out of range" in str(e.value)


@pytest.mark.parametrize("value,shown", [
    ("w.bin", "'w.bin'"),
    ("a" * 58, repr("a" * 58)),                    # 60 with the quotes: whole
    ("a" * 59, repr("a" * 59)[:57] + "..."),       # 61: shortened to 60
    ("../" * 40, repr("../" * 40)[:57] + "..."),
])
def test_hostile_paths_are_shown_quoted_and_short(value, shown):
    assert beneath._show(value) == shown
    assert beneath._show(value, limit=10) == (shown if len(repr(value)) <= 10 else repr(value)[:7] + "...")


def test_parse_manifest_names_where_the_bytes_came_from_in_every_error():
    """Bad JSON and a bad field alike are reported against the file the caller names."""
    where = "out/mlp/manifest.json"
    with pytest.raises(ArtifactError) as e:
        m.parse_manifest(b"{", where)
    assert e.value.message.startswith(f"{where}: the manifest is not valid JSON (")
    with pytest.raises(ArtifactError) as e:
        m.parse_manifest(b'{"format": "anec-artifact/0"}', where)
    assert e.value.message == f'{where}: field \'format\': expected "anec-artifact/1", got "anec-artifact/0"'
