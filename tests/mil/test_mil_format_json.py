"""The manifest's JSON layout (``format_json``): flat dicts and lists of scalars on one line
when short, everything else indented, and always ordinary JSON."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from anec.mil.json_format import format_json


def reference(obj, indent=0):
    """The layout spelled out piece by piece (the rule format_json implements)."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    scalar_list = lambda v: isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)  # noqa: E731
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        one = "{" + ", ".join(f"{json.dumps(k)}: {reference(v)}" for k, v in obj.items()) + "}"
        if all(not isinstance(v, (dict, list)) or scalar_list(v) for v in obj.values()) and len(one) <= 120:
            return one
        return "{\n" + ",\n".join(f"{inner}{json.dumps(k)}: {reference(v, indent + 1)}" for k, v in obj.items()) \
            + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if scalar_list(obj):
            return "[" + ", ".join(json.dumps(v) for v in obj) + "]"
        return "[\n" + ",\n".join(inner + reference(v, indent + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj)


scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=30)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner,
                                                                                           max_size=6), max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_layout_is_the_rule_and_reads_back(obj):
    text = format_json(obj)
    assert text == reference(obj)
    assert json.loads(text) == obj


def test_shapes_and_small_records_stay_on_one_line():
    m = {"weights": [{"key": "h.0.w", "shape": [768, 768, 1, 1], "offset": 64, "perm": None}], "func": "f"}
    assert format_json(m) == ('{\n  "weights": [\n    {"key": "h.0.w", "shape": [768, 768, 1, 1], "offset": 64, '
                              '"perm": null}\n  ],\n  "func": "f"\n}')
    long = {f"k{i}": "v" * 10 for i in range(8)}  # flat but longer than 120 characters
    assert format_json(long).count("\n") == 9
