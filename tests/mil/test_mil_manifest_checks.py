"""The manifest schema's building blocks, one by one, with the exact messages they give.

The schema (anec/mil/manifest.py) is assembled from small checkers when the
module is imported; the artifact tests exercise that assembled schema. These
tests build the checkers themselves, so each one's bounds and wording are held
by a test of its own (values shown shortened, bounds written as powers of two).
"""

from __future__ import annotations

import json

import pytest

from anec import fsutil
from anec.diagnostics import ArtifactError
from anec.mil import beneath, manifest as m


def bad(check, value, path="f"):
    with pytest.raises(m.ManifestFieldError) as e:
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
        fsutil.parse_json(b'{"a": 1e999}', "m.json")
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(('{"a": ' + text + '.5}').encode(), "m.json")
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


def test_integer_takes_both_bounds_and_refuses_what_is_not_an_int_in_range():
    """Both bounds are inclusive; bools, floats and strings are refused even when in range."""
    check = m.integer(2, 5)
    assert check(2, "n") == 2 and check(5, "n") == 5
    for v in (1, 6, True, 3.0, "3", None):
        e = bad(check, v, "limits.n")
        assert (e.path, e.expected, e.got, e.show_got) == ("limits.n", "an integer in [2, 5]", v, True)
    e = bad(m.integer(0, 3), True)  # a bool in range is still not an integer
    assert e.got is True
    e = bad(m.integer(0, 1 << 62, "an offset"), -1, "w.offset")
    assert (e.path, e.expected, e.got) == ("w.offset", "an offset", -1)


def test_boolean_takes_true_and_false_only():
    """Only JSON true and false pass, not 1 or 0."""
    assert m.boolean(True, "b") is True and m.boolean(False, "b") is False
    for v in (1, 0, "true", None):
        e = bad(m.boolean, v, "limits.allow_fp32_io")
        assert (e.path, e.expected, e.got) == ("limits.allow_fp32_io", "true or false", v)


def test_string_is_non_empty_bounded_without_nul_and_matches_its_pattern():
    """The length bound is inclusive; the pattern, when given, must match."""
    check = m.string(4)
    assert check("a", "s") == "a" and check("abcd", "s") == "abcd"
    for v in ("", "abcde", "a\0b", 7, None):
        e = bad(check, v, "target")
        assert (e.path, e.expected, e.got) == ("target", "a non-empty string of at most 4 characters", v)
    ident = m.string(8, m._MIL_NAME, "a MIL identifier")
    assert ident("x_1", "n") == "x_1"
    for v in ("1x", "x y", "", 5):
        e = bad(ident, v, "inputs[0].name")
        assert (e.path, e.expected, e.got) == ("inputs[0].name", "a MIL identifier", v)


def test_one_of_takes_only_the_listed_strings():
    """Values are compared exactly, case included; the message lists them quoted."""
    check = m.one_of("fp16", "fp32")
    assert check("fp16", "d") == "fp16" and check("fp32", "d") == "fp32"
    for v in ("int8", "FP16", 16, None):
        e = bad(check, v, "inputs[0].dtype")
        assert (e.path, e.expected, e.got) == ("inputs[0].dtype", 'one of "fp16", "fp32"', v)


def test_hex64_is_64_lowercase_hex_digits():
    """Exactly 64 digits of 0-9a-f; uppercase is refused."""
    assert m.hex64("0123456789abcdef" * 4, "h") == "0123456789abcdef" * 4
    for v in ("A" * 64, "a" * 63, "a" * 65, "g" * 64, 5, None):
        e = bad(m.hex64, v, "mil.sha256")
        assert (e.path, e.expected, e.got) == ("mil.sha256", "a sha256 (64 lowercase hex digits)", v)


def test_a_relative_path_has_plain_components_and_a_bounded_length():
    """Absolute, backslash, NUL and over-long paths are refused; empty, . and .. components too."""
    check = m.rel_path()
    what = "a relative path inside the artifact"
    for v in ("model.mil", "a/b.bin", "x" * 1024, "..a/b."):
        assert check(v, "p") == v
    for v in (7, None, "", "x" * 1025, "a\\b", "a\0b", "/etc/passwd", "/"):
        e = bad(check, v, "mil.file")
        assert (e.path, e.expected, e.got) == ("mil.file", what, v)
    for v in ("a//b", "a/", "./a", "a/./b", "../a", "a/..", ".."):
        e = bad(check, v, "mil.file")
        assert (e.path, e.expected, e.got) == ("mil.file", what + " (plain names, no '..')", v)


def test_a_path_below_a_directory_starts_with_it_and_names_a_file_in_it():
    """The directory is the first component and is followed by at least one more."""
    check = m.rel_path("weights")
    what = "a relative path inside the artifact, below weights/"
    assert check("weights/w1.bin", "p") == "weights/w1.bin"
    assert check("weights/a/w.bin", "p") == "weights/a/w.bin"
    for v in ("weights", "w1.bin", "inputs/w1.bin", "x/weights/w1.bin", "weights/../w1.bin"):
        e = bad(check, v, "weights[0].file")
        assert (e.path, e.expected, e.got) == ("weights[0].file", what + " (plain names, no '..')", v)
    e = bad(check, "/weights/w1.bin", "weights[0].file")
    assert e.expected == what


def test_an_array_is_a_list_within_its_bounds_with_each_item_checked():
    """Both length bounds are inclusive; an item's error names its index."""
    check = m.array(m.integer(0, 9), 3)
    assert check([], "a") == [] and check([1, 2, 3], "a") == [1, 2, 3]
    e = bad(check, [1, 2, 3, 4], "inputs")
    assert (e.path, e.expected, e.got, e.show_got) == ("inputs", "an array of 0 to 3 items", "4 items", False)
    e = bad(check, [1, 10], "inputs")
    assert (e.path, e.expected, e.got) == ("inputs[1]", "an integer in [0, 9]", 10)
    for v in ({"a": 1}, "abc", None):
        e = bad(check, v, "inputs")
        assert (e.path, e.expected, e.got, e.show_got) == ("inputs", "an array", v, True)
    pieces = m.array(m.integer(0, 9), 2, 1)
    assert pieces([5], "p") == [5] and pieces([5, 6], "p") == [5, 6]
    e = bad(pieces, [], "lo.pieces")
    assert (e.path, e.expected, e.got) == ("lo.pieces", "an array of 1 to 2 items", "0 items")


def test_an_object_checks_its_required_and_present_optional_fields():
    """Unknown fields are kept; a top-level field is named without a leading dot."""
    check = m.obj({"a": m.integer(0, 1)}, {"b": m.boolean})
    v = {"a": 1, "other": "kept"}
    assert check(v, "") is v and check({"a": 0, "b": False}, "x") == {"a": 0, "b": False}
    e = bad(check, {"a": 2}, "")
    assert (e.path, e.expected, e.got) == ("a", "an integer in [0, 1]", 2)   # top level: no leading dot
    e = bad(check, {"a": 1, "b": 1}, "limits")
    assert (e.path, e.expected, e.got) == ("limits.b", "true or false", 1)
    e = bad(check, {"b": True}, "")
    assert (e.path, e.expected, e.show_got) == ("a", "a value (the field is missing)", False)
    for v in ([1], "a", None):
        e = bad(check, v, "limits")
        assert (e.path, e.expected, e.got, e.show_got) == ("limits", "an object", v, True)


def test_json_nested_exactly_to_the_limit_is_read():
    """32 levels are read, 33 are refused."""
    deepest = b"[" * fsutil.JSON_MAX_DEPTH + b"]" * fsutil.JSON_MAX_DEPTH
    assert fsutil.json_depth(fsutil.parse_json(deepest, "m.json")) == fsutil.JSON_MAX_DEPTH
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b"[" + deepest + b"]", "m.json")
    assert e.value.message == "m.json: the manifest is nested too deeply (at most 32 levels)"


def test_json_errors_name_what_was_read_and_quote_the_parser():
    """The reader's own message is quoted after the file and what it holds."""
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b"", "m.json")
    assert e.value.message == "m.json: the manifest is not valid JSON (Expecting value: line 1 column 1 (char 0))"
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b'{"a": 1, "a": 2}', "s.json", "stage index")
    assert e.value.message == 's.json: the stage index is not valid JSON (key "a" appears twice in one object)'
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b'[NaN]', "m.json")
    assert e.value.message == "m.json: the manifest is not valid JSON (NaN is not a JSON number)"
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b"[" + b"1" * 21 + b"]", "m.json")
    assert e.value.message == "m.json: the manifest is not valid JSON (integer of 21 digits is too large)"
    assert fsutil.parse_json(b'{"a": [1, 2.5, "\xc3\xa9"]}', "m.json") == {"a": [1, 2.5, "\u00e9"]}


def test_depth_counts_the_nested_objects_and_arrays_of_a_value():
    """A scalar has depth 0, each enclosing object or array adds one."""
    assert [fsutil.json_depth(v) for v in (7, "a", None, [], {}, [1, [2]], {"a": [{"b": 1}]})] == [0, 0, 0, 1, 1, 2, 3]


def test_bytes_that_are_not_utf8_are_refused_with_the_offset_of_the_first_bad_byte():
    """The offset is that of the first byte that does not decode."""
    with pytest.raises(ArtifactError) as e:
        fsutil.parse_json(b'{"a": "\xc3"}', "ir.json", "program IR")
    assert e.value.message == "ir.json: the program IR is not valid UTF-8 (byte 7)"
