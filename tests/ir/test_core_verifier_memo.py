"""The verifier shares one type inference between alike nodes; it must still check each node.

Nodes whose op, operand types, attributes and declared type are equal share
an inference (see anec/ir/verify_types.py). These tests edit graphs after a
verification has filled that memo and check that every edit is still caught,
and that a warm memo reports exactly what a cold one does.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from anec.ir import verify_types
from anec.ir.parser import parse, parse_file
from anec.ir.types import DType, TensorType
from anec.ir.verifier import verify, verify_all

ROOT = Path(__file__).resolve().parents[2]

TEXT = """func f(%x: fp16[1, 8, 1, 8]) {
  %a = softmax(%x, axis=1)
  %b = softmax(%a, axis=1)
  %c = relu(%b)
  return %c
}
"""


def _messages(target) -> list[str]:
    return [e.render() for e in verify_all(target)]


def _cold(target) -> list[str]:
    saved = dict(verify_types.INFERRED), set(verify_types.GOOD_TYPES), dict(verify_types.GOOD_TYPE_IDS)
    by_id = dict(verify_types.INFERRED_BY_ID)
    verify_types.INFERRED.clear()
    verify_types.INFERRED_BY_ID.clear()
    verify_types.GOOD_TYPES.clear()
    verify_types.GOOD_TYPE_IDS.clear()
    try:
        return _messages(target)
    finally:
        verify_types.INFERRED.update(saved[0])
        verify_types.INFERRED_BY_ID.update(by_id)
        verify_types.GOOD_TYPES.update(saved[1])
        verify_types.GOOD_TYPE_IDS.update(saved[2])


@pytest.mark.parametrize("bad", [True, 1.0, 7, "1", None, [1], (1,), math.nan])
def test_an_attribute_equal_in_value_but_not_in_kind_is_checked(bad):
    module = parse(TEXT)
    assert verify_all(module) == []  # the memo now knows softmax(axis=1) on this type
    node = module.func().nodes[1]
    node.attrs["axis"] = bad
    errors = _messages(module)
    assert errors and "axis" in errors[0]
    assert errors == _cold(module)


def test_a_changed_operand_or_result_type_is_checked():
    module = parse(TEXT)
    verify(module)
    g = module.func()
    g.set_input_type(g.inputs[0], TensorType(DType.fp16, (1, 8, 1, 4)))
    errors = _messages(module)
    assert errors and "does not match the inferred type" in errors[0]
    assert errors == _cold(module)

    module = parse(TEXT)
    verify(module)
    r = module.func().nodes[2].results[0]
    r.type = r.type.with_dtype(DType.fp32)
    assert "does not match the inferred type" in _messages(module)[0]


def test_an_invalid_type_object_is_reported_not_raised():
    module = parse(TEXT)
    verify(module)
    g = module.func()
    g.nodes[0].results[0].type = [1, 8, 1, 8]  # unhashable and not a TensorType
    errors = _messages(module)
    assert any("is not a TensorType" in e for e in errors)


def test_negative_zero_and_zero_are_different_attributes():
    key = verify_types.literal_key
    assert key({"v": 0.0}) != key({"v": -0.0})
    assert key({"v": 1}) != key({"v": True}) != key({"v": 1.0})
    assert key({"v": [1, 2]}) != key({"v": (1, 2)})
    assert key({"v": list(range(1000))}) is None  # long lists take the general path
    assert key({"v": "\ud800"}) is None
    assert key({"not an ident": 1}) is None


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.ir")), ids=lambda p: p.name)
def test_warm_and_cold_agree_on_the_examples_and_their_mutations(path):
    module = parse_file(path)
    assert _messages(module) == _cold(module) == []
    # break every node once in turn: a wrong declared type on its first result
    nodes = [n for g in module.funcs.values() for n in g.nodes]
    for node in nodes[:40]:
        if not node.results or not node.results[0].type.shape:
            continue
        r = node.results[0]
        old = r.type
        r.type = TensorType(old.dtype, (*old.shape[:-1], old.shape[-1] + 1))
        warm = _messages(module)
        assert warm and warm == _cold(module), node
        r.type = old
    assert _messages(module) == []
