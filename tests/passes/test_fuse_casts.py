"""fuse-casts: the exactness law and its negative examples."""

from __future__ import annotations

import numpy as np
import pytest

from anec.ir.types import DType
from anec.passes import DeadCodeElimination, FuseCasts, PassContext
from anec.passes.fuse_casts import folds, holds_all
from anec.weight_store import WeightStore

from .passes_util import compare, ops_of, parse_func, run, weights_for

CLEAN = (FuseCasts(), DeadCodeElimination())


def chain(src: str, a: str, b: str) -> str:
    return f"""
func f(%x: {src}[1, 4, 1, 4]) {{
  %a = cast(%x, dtype={a}) : {a}[1, 4, 1, 4]
  %b = cast(%a, dtype={b}) : {b}[1, 4, 1, 4]
  %y = identity(%b) : {b}[1, 4, 1, 4]
  return %y
}}"""


def test_no_op_cast_is_dropped():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 4]) {
  %c = cast(%x, dtype=fp16) : fp16[1, 4, 1, 4]
  %y = relu(%c) : fp16[1, 4, 1, 4]
  return %y
}""")
    run(CLEAN, g)
    assert ops_of(g) == ["relu"]
    assert g.nodes[0].operands[0].name == "x"


def test_round_trip_through_wider_type_folds_to_x():
    g = parse_func(chain("fp16", "fp32", "fp16"))
    run(CLEAN, g)
    assert ops_of(g) == ["identity"]
    assert g.nodes[0].operands[0].name == "x"


@pytest.mark.parametrize("src,a,b,folded", [
    ("fp32", "fp16", "fp32", False),   # fp16 rounds fp32 values
    ("int32", "fp32", "int32", False),  # 2**24 + 1 is not an fp32
    ("fp16", "int8", "fp32", False),   # int8 truncates
    ("int8", "uint8", "int32", False),  # uint8 has no negatives
    ("int8", "fp16", "uint8", False),  # -128: saturates to 0 via fp16, wraps to 128 directly
    ("int8", "fp16", "fp32", True),    # fp16 holds every int8: cast(x, fp32)
    ("uint8", "int32", "fp16", True),
    ("bool", "int8", "fp32", True),
])
def test_cast_chain_folds_only_when_middle_type_holds_source(src, a, b, folded):
    g = parse_func(chain(src, a, b))
    run(CLEAN, g)
    casts = [n for n in g.nodes if n.op == "cast"]
    if folded:
        assert len(casts) == 1 and casts[0].operands[0].name == "x"
        assert casts[0].result.type.dtype == DType(b)
    else:
        assert len(casts) == 2


def test_holds_all_table():
    assert holds_all(DType.fp32, DType.fp16)
    assert not holds_all(DType.fp16, DType.fp32)
    assert not holds_all(DType.fp32, DType.int32)
    assert holds_all(DType.fp16, DType.int8) and holds_all(DType.fp16, DType.uint8)
    assert not holds_all(DType.int8, DType.uint8) and not holds_all(DType.uint8, DType.int8)
    assert not holds_all(DType.bool, DType.int8)


def test_cast_law_checked_numerically_on_all_dtypes():
    """Whenever folds(src, a, b), cast(cast(x, a), b) == cast(x, b) on extreme values."""
    from anec.ir.ops import OPS

    cast = OPS["cast"].ref
    samples = {
        DType.fp32: np.array([0.0, -0.0, 1.5, -2.75, 65504.0, 1e6, -1e9, 3.4e38, np.inf, np.nan,
                              16777217.0, 0.1], np.float32),
        DType.fp16: np.array([0.0, 1.5, -2.75, 65504.0, -65504.0, 6e-8, np.inf, np.nan, 0.1],
                             np.float16),
        DType.int32: np.array([0, 1, -1, 2**31 - 1, -(2**31), 16777217, 300, -129], np.int32),
        DType.int8: np.array([0, 127, -128, 5], np.int8),
        DType.uint8: np.array([0, 255, 128], np.uint8),
        DType.bool: np.array([True, False]),
    }
    for src, xs in samples.items():
        for a in DType:
            for b in DType:
                if not folds(src, a, b):
                    continue
                two = cast([cast([xs], {}, {"dtype": a})[0]], {}, {"dtype": b})[0]
                one = cast([xs], {}, {"dtype": b})[0]
                np.testing.assert_array_equal(two, one, err_msg=f"{src}->{a}->{b}")


def test_cast_of_weight_const_folds_into_declared_dtype():
    text = """
func f(%x: fp16[1, 4, 1, 4]) {
  %w = const(weight="w") : fp32[4, 4, 1, 1]
  %wh = cast(%w, dtype=fp16) : fp16[4, 4, 1, 1]
  %y = conv1x1(%x, %wh) : fp16[1, 4, 1, 4]
  return %y
}"""
    g = parse_func(text)
    before = g.clone()
    w = weights_for(g)
    run(CLEAN, g, PassContext.default(weights=w))
    assert ops_of(g) == ["const", "conv1x1"]
    const = g.nodes[0]
    assert const.attrs == {"weight": "w"} and const.result.type.dtype == DType.fp16
    assert const.result.name == "wh"
    compare(before, g, w, rtol=0, atol=0)


def test_cast_of_fp16_weight_to_fp32_is_not_folded_when_stored_fp32():
    g = parse_func("""
func f(%x: fp32[1, 4, 1, 4]) {
  %w = const(weight="w") : fp16[4, 4, 1, 1]
  %wf = cast(%w, dtype=fp32) : fp32[4, 4, 1, 1]
  %y = conv1x1(%x, %wf) : fp32[1, 4, 1, 4]
  return %y
}""")
    store = WeightStore({"w": np.full((4, 4, 1, 1), 0.1, np.float32)})
    run(CLEAN, g, PassContext.default(weights=store))
    assert ops_of(g) == ["const", "cast", "conv1x1"]
    # stored in fp16 already: the fp16 declaration loses nothing, so it folds
    g2 = parse_func(text_fp16 := """
func f(%x: fp32[1, 4, 1, 4]) {
  %w = const(weight="w") : fp16[4, 4, 1, 1]
  %wf = cast(%w, dtype=fp32) : fp32[4, 4, 1, 1]
  %y = conv1x1(%x, %wf) : fp32[1, 4, 1, 4]
  return %y
}""")
    assert text_fp16
    store16 = WeightStore({"w": np.full((4, 4, 1, 1), 0.1, np.float16)})
    run(CLEAN, g2, PassContext.default(weights=store16))
    assert ops_of(g2) == ["const", "conv1x1"]


def test_cast_of_value_const_converts_the_literal():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 4]) {
  %c = const(value=0.1) : fp32[]
  %ch = cast(%c, dtype=fp16) : fp16[]
  %y = mul(%x, %ch) : fp16[1, 4, 1, 4]
  return %y
}""")
    before = g.clone()
    run(CLEAN, g)
    assert ops_of(g) == ["const", "mul"]
    c = g.nodes[0]
    assert c.result.type.dtype == DType.fp16
    assert c.attrs["value"] == float(np.float16(np.float32(0.1)))
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_returned_cast_keeps_its_name():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 4]) {
  %r = relu(%x) : fp16[1, 4, 1, 4]
  %a = cast(%r, dtype=fp32) : fp32[1, 4, 1, 4]
  %y = cast(%a, dtype=fp16) : fp16[1, 4, 1, 4]
  return %y
}""")
    run(CLEAN, g)
    assert ops_of(g) == ["relu"] and g.output_names() == ["y"]


def test_returned_no_op_cast_of_an_input_becomes_identity():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 4]) {
  %y = cast(%x, dtype=fp16) : fp16[1, 4, 1, 4]
  return %y
}""")
    run(CLEAN, g)
    assert ops_of(g) == ["identity"] and g.output_names() == ["y"]


def test_folds_takes_every_chain_the_rule_allows():
    """The other direction of the cast law: whenever the inner cast is exact, the chain
    folds unless b is an int that cannot hold src and the inner cast changes kind
    (int <-> float <-> bool), where int wraps but float saturates."""
    kind = {DType.fp32: "float", DType.fp16: "float", DType.int32: "int", DType.int8: "int",
            DType.uint8: "int", DType.bool: "bool"}
    for src in DType:
        for a in DType:
            for b in DType:
                exact = holds_all(a, src)
                if not exact:
                    assert not folds(src, a, b), (src, a, b)
                elif kind[b] != "int" or holds_all(b, src) or kind[a] == kind[src]:
                    assert folds(src, a, b), (src, a, b)
                else:
                    assert not folds(src, a, b), (src, a, b)
    # the corners named above, spelled out
    assert folds(DType.int8, DType.fp16, DType.bool)  # bool: x != 0 whatever the middle kind
    assert folds(DType.bool, DType.fp16, DType.int8)  # int8 holds bool: no wrap possible
    assert not folds(DType.uint8, DType.fp16, DType.int8)  # 200 via fp16 saturates to 127; directly it wraps to -56


@pytest.mark.parametrize("literal,shape,want", [("2.5", "[2]", 2.5), ("[2.5, 2.5]", "[2]", [2.5, 2.5]),
                                                ("[1.5, -3.0]", "[2]", [1.5, -3.0]), ("7.0", "[]", 7.0)])
def test_cast_of_value_const_keeps_the_literal_form(literal, shape, want):
    """A scalar literal (broadcast to the const's shape) stays a scalar, a list stays a list."""
    g = parse_func(f"""
func f(%x: fp16[1, 1, 1, 2]) {{
  %c = const(value={literal}) : fp32{shape}
  %ch = cast(%c, dtype=fp16) : fp16{shape}
  %y = mul(%x, %ch) : fp16[1, 1, 1, 2]
  return %y
}}""")
    before = g.clone()
    run(CLEAN, g)
    assert ops_of(g) == ["const", "mul"]
    assert g.nodes[0].attrs["value"] == want and g.nodes[0].result.type.dtype == DType.fp16
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_cast_of_value_const_to_an_integer_writes_an_integer_literal():
    g = parse_func("""
func f(%x: int32[2]) {
  %c = const(value=2.7) : fp32[2]
  %ci = cast(%c, dtype=int32) : int32[2]
  %y = add(%x, %ci) : int32[2]
  return %y
}""")
    before = g.clone()
    run(CLEAN, g)
    assert ops_of(g) == ["const", "add"]
    value = g.nodes[0].attrs["value"]
    assert value == 2 and type(value) is int
    compare(before, g, WeightStore({}), rtol=0, atol=0)


@pytest.mark.parametrize("a,b", [("fp16", "int32"), ("fp32", "int8"), ("fp16", "bool")])
def test_cast_of_weight_const_to_a_non_float_stays_a_cast(a, b):
    """Only float -> float casts fold into a weight declaration: a weight read as an integer
    would not be truncated the way the cast truncates."""
    g = parse_func(f"""
func f(%x: {b}[4]) {{
  %w = const(weight="w") : {a}[4]
  %wi = cast(%w, dtype={b}) : {b}[4]
  %y = identity(%wi) : {b}[4]
  return %y
}}""")
    store = WeightStore({"w": np.array([0.7, -1.5, 2.0, 0.0], np.float16)})
    before = g.clone()
    run(CLEAN, g, PassContext.default(weights=store))
    assert "cast" in ops_of(g)
    compare(before, g, store, rtol=0, atol=0)
