"""Type inference of every op in the table, and its error messages."""

from __future__ import annotations

import math

import pytest

from anec.ir import ops
from anec.ir.ops import OPS, InferError, infer_types, with_defaults
from anec.ir.types import DType, TensorType

F16, F32, I32, BOOL = DType.fp16, DType.fp32, DType.int32, DType.bool


def T(dtype: DType, *shape: int) -> TensorType:
    return TensorType(dtype, shape)


def infer(op, *operands, optional=None, **attrs):
    return infer_types(op, list(operands), optional or {}, attrs)


def one(op, *operands, **kw):
    (t,) = infer(op, *operands, **kw)
    return t


def fails(op, *operands, match: str, hint: str | None = None, optional=None, declared=None, **attrs):
    with pytest.raises(InferError) as ei:
        infer_types(op, list(operands), optional or {}, attrs, declared=declared)
    assert ei.value.message == match, ei.value.message
    assert ei.value.message[0].islower(), "diagnostics start lowercase"
    assert not ei.value.message.endswith("."), "diagnostics have no final period"
    if hint is not None:
        assert ei.value.hint is not None and hint in ei.value.hint, ei.value.hint
    return ei.value


def test_table_has_the_core_ops_of_the_design():
    expected = """const identity neg exp sqrt rsqrt relu tanh sigmoid gelu cast conv1x1 matmul add sub
    mul pow softmax reduce_sum reduce_mean reduce_max reshape transpose slice split pad concat""".split()
    assert [name for name in OPS if name in expected] == expected  # in documentation order
    assert ops.ELEMENTWISE >= ops.UNARY | ops.BINARY
    assert ops.REDUCTIONS == {"reduce_sum", "reduce_mean", "reduce_max"}
    for group in (ops.UNARY, ops.BINARY, ops.REDUCTIONS, ops.SHAPE_OPS, ops.LINEAR, ops.NOT_ON_ANE):
        assert group <= set(OPS)
    for op in OPS.values():
        assert op.doc and op.dtypes
        for a in op.attrs:
            assert a.kind in ops.ATTR_KINDS


# ---- generic checks --------------------------------------------------------


def test_unknown_op_suggests():
    e = fails("gleu", T(F16, 2), match="unknown op 'gleu'")
    assert e.hint == "did you mean 'gelu'?"


def test_operand_count():
    fails("add", T(F16, 2), match="add takes 2 operands, got 1", hint="operands: x, y")
    fails("exp", T(F16, 2), T(F16, 2), match="exp takes 1 operand, got 2")
    fails("concat", T(F16, 2), match="concat takes at least 2 operands, got 1", hint="identity")


def test_attribute_schema():
    fails("gelu", T(F16, 2), match="gelu has no attribute 'mdoe'", hint="did you mean 'mode'?", mdoe="tanh")
    fails("exp", T(F16, 2), match="exp has no attribute 'axis'", hint="exp takes no attributes", axis=1)
    fails("gelu", T(F16, 2), match="attribute 'mode' of gelu must be one of \"exact\", \"tanh\", got \"erf\"",
          mode="erf")
    fails("softmax", T(F16, 2), match='attribute \'axis\' of softmax must be an int, got "1"', axis="1")
    fails("softmax", T(F16, 2), match="attribute 'axis' of softmax must be an int, got true", axis=True)
    fails("reduce_sum", T(F16, 2), match="reduce_sum requires attribute 'axes'", hint="axes=")
    fails("cast", T(F16, 2), match="attribute 'dtype' of cast must be a dtype (fp16, fp32, int32, bool, "
          "int8, uint8), got \"fp64\"", dtype="fp64")


def test_optional_operand_names():
    fails("conv1x1", T(F16, 1, 4, 1, 8), T(F16, 2, 4, 1, 1), optional={"bais": T(F16, 1, 2, 1, 1)},
          match="conv1x1 has no optional operand 'bais'", hint="did you mean 'bias'?")
    fails("add", T(F16, 2), T(F16, 2), optional={"bias": T(F16, 2)}, match="add has no optional operand 'bias'")


def test_dtype_domains():
    fails("exp", T(I32, 2), match="exp does not accept int32 operands (accepts fp16, fp32)", hint="cast")
    fails("add", T(BOOL, 2), T(BOOL, 2), match="add does not accept bool operands (accepts fp16, fp32, int32)")
    fails("pad", T(I32, 2), match="pad does not accept int32 operands (accepts fp16, fp32)",
          before=[0], after=[1])
    assert one("add", T(I32, 2), T(I32, 2)) == T(I32, 2)
    assert one("reduce_mean", T(I32, 2, 3), axes=[1]) == T(I32, 2)
    assert one("matmul", T(I32, 2, 3), T(I32, 3, 4)) == T(I32, 2, 4)
    for dt in DType:
        assert one("reshape", T(dt, 2, 3), shape=[6]) == T(dt, 6)
        assert one("cast", T(F16, 2), dtype=dt) == T(dt, 2)
        assert one("identity", T(dt, 2)) == T(dt, 2)


def test_with_defaults():
    assert with_defaults("matmul", {}) == {"transpose_x": False, "transpose_y": False}
    assert with_defaults("gelu", {"mode": "tanh"}) == {"mode": "tanh"}
    assert with_defaults("slice", {"begin": [0], "end": [1]}) == {"begin": [0], "end": [1]}
    assert with_defaults("cast", {"dtype": "fp16"}) == {"dtype": DType.fp16}
    assert with_defaults("pad", {"before": [0], "after": [0]})["value"] == 0.0


# ---- per op ----------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(ops.UNARY))
def test_unary_keeps_type(op):
    assert one(op, T(F16, 1, 768, 1, 64)) == T(F16, 1, 768, 1, 64)
    assert one(op, T(F32)) == T(F32)


def test_cast_and_gelu():
    assert one("cast", T(F32, 3, 4), dtype=F16) == T(F16, 3, 4)
    assert one("cast", T(F32, 3, 4), dtype="int32") == T(I32, 3, 4)
    assert one("gelu", T(F16, 5), mode="tanh") == T(F16, 5)


def test_conv1x1():
    x, w = T(F16, 1, 768, 1, 64), T(F16, 3072, 768, 1, 1)
    assert one("conv1x1", x, w) == T(F16, 1, 3072, 1, 64)
    assert one("conv1x1", x, w, optional={"bias": T(F16, 1, 3072, 1, 1)}) == T(F16, 1, 3072, 1, 64)
    fails("conv1x1", T(F16, 768, 64), w, match="conv1x1 input must be rank 4 [N, Cin, H, W], got fp16[768, 64]",
          hint="[1, C, 1, S]")
    fails("conv1x1", x, T(F16, 3072, 768), match="conv1x1 weight must be [Cout, Cin, 1, 1], got fp16[3072, 768]")
    fails("conv1x1", x, T(F16, 3072, 768, 3, 3), match="conv1x1 weight must be [Cout, Cin, 1, 1], got "
          "fp16[3072, 768, 3, 3]")
    fails("conv1x1", x, T(F16, 3072, 512, 1, 1),
          match="conv1x1 input channels differ: input has 768, weight expects 512")
    fails("conv1x1", x, T(F32, 3072, 768, 1, 1),
          match="conv1x1 input and weight have different dtypes: fp16 vs fp32", hint="cast")
    fails("conv1x1", x, w, optional={"bias": T(F16, 3072)},
          match="conv1x1 bias must be [1, 3072, 1, 1], got fp16[3072]", hint="[1, Cout, 1, 1]")
    fails("conv1x1", x, w, optional={"bias": T(I32, 1, 3072, 1, 1)},
          match="conv1x1 does not accept int32 bias operands (accepts fp16, fp32)")
    fails("conv1x1", x, w, optional={"bias": T(F32, 1, 3072, 1, 1)},
          match="conv1x1 input and bias have different dtypes: fp16 vs fp32")


def test_matmul_shapes_and_flags():
    assert one("matmul", T(F16, 4, 8), T(F16, 8, 3)) == T(F16, 4, 3)
    assert one("matmul", T(F16, 8, 4), T(F16, 8, 3), transpose_x=True) == T(F16, 4, 3)
    assert one("matmul", T(F16, 4, 8), T(F16, 3, 8), transpose_y=True) == T(F16, 4, 3)
    assert one("matmul", T(F16, 8, 4), T(F16, 3, 8), transpose_x=True, transpose_y=True) == T(F16, 4, 3)
    # batch dims broadcast numpy-style
    assert one("matmul", T(F16, 1, 12, 64, 64), T(F16, 1, 12, 64, 64), transpose_y=True) == T(F16, 1, 12, 64, 64)
    assert one("matmul", T(F16, 2, 1, 4, 8), T(F16, 5, 8, 3)) == T(F16, 2, 5, 4, 3)
    assert one("matmul", T(F16, 1, 128, 256), T(F16, 256, 1000)) == T(F16, 1, 128, 1000)


def test_matmul_errors():
    e = fails("matmul", T(F16, 4, 64), T(F16, 32, 3), match="matmul inner dimensions differ: 64 vs 32")
    assert "transpose" in e.hint
    fails("matmul", T(F16, 64), T(F16, 64, 3), match="matmul operands must have rank >= 2, got x: fp16[64]",
          hint="[1, K]")
    fails("matmul", T(F16, 2, 4, 8), T(F16, 3, 8, 2),
          match="matmul batch dimensions do not broadcast: [2] vs [3] (dim 0: 2 vs 3)")
    fails("matmul", T(F16, 4, 8), T(F32, 8, 2), match="matmul operands have different dtypes: fp16 vs fp32")


def test_binary_broadcasting():
    assert one("add", T(F16, 1, 768, 1, 64), T(F16, 1, 1, 1, 64)) == T(F16, 1, 768, 1, 64)
    assert one("mul", T(F16, 1, 768, 1, 64), T(F16)) == T(F16, 1, 768, 1, 64)
    assert one("sub", T(F16, 3, 1), T(F16, 1, 4)) == T(F16, 3, 4)
    assert one("pow", T(F32, 4), T(F32, 2, 1, 1)) == T(F32, 2, 1, 4)
    e = fails("add", T(F16, 1, 768, 1, 64), T(F16, 1, 512, 1, 64),
              match="add operands do not broadcast: [1, 768, 1, 64] vs [1, 512, 1, 64] (dim 1: 768 vs 512)")
    assert "equal or 1" in e.hint
    fails("mul", T(F16, 2), T(F32, 2), match="mul operands have different dtypes: fp16 vs fp32",
          hint="cast(..., dtype=fp16)")


def test_softmax():
    assert one("softmax", T(F16, 2, 5)) == T(F16, 2, 5)
    assert one("softmax", T(F16, 2, 5), axis=0) == T(F16, 2, 5)
    fails("softmax", T(F16, 2, 5), axis=2, match="softmax axis 2 is out of range for rank 2 (valid: -2..1)")
    fails("softmax", T(F16), match="softmax axis -1 is out of range for rank 0 (valid: none: the operand is a scalar)")


@pytest.mark.parametrize("op", sorted(ops.REDUCTIONS))
def test_reductions(op):
    x = T(F16, 2, 3, 4, 5)
    assert one(op, x, axes=[1]) == T(F16, 2, 4, 5)
    assert one(op, x, axes=[1], keep_dims=True) == T(F16, 2, 1, 4, 5)
    assert one(op, x, axes=[-1, 0]) == T(F16, 3, 4)
    assert one(op, x, axes=[-1, 0], keep_dims=True) == T(F16, 1, 3, 4, 1)
    assert one(op, x, axes=[0, 1, 2, 3]) == T(F16)
    fails(op, x, axes=[1, -3], match=f"{op} axes [1, -3] name the same axis twice")
    fails(op, x, axes=[4], match=f"{op} axis 4 is out of range for rank 4 (valid: -4..3)")
    fails(op, x, axes=[], match=f"{op} axes must not be empty", hint="axes=[1]")


def test_reshape():
    x = T(F16, 1, 768, 1, 64)
    assert one("reshape", x, shape=[1, 12, 64, 64]) == T(F16, 1, 12, 64, 64)
    assert one("reshape", x, shape=[1, -1, 64]) == T(F16, 1, 768, 64)
    assert one("reshape", x, shape=[-1]) == T(F16, 49152)
    fails("reshape", x, shape=[-1, -1], match="reshape shape [-1, -1] has more than one -1")
    fails("reshape", x, shape=[0, 10], match="reshape shape [0, 10] has an invalid dim 0")
    fails("reshape", x, shape=[5, -1],
          match="reshape cannot infer -1: 49152 elements of fp16[1, 768, 1, 64] are not divisible by 5")
    fails("reshape", x, shape=[768, 65],
          match="reshape changes the element count: fp16[1, 768, 1, 64] has 49152, shape [768, 65] has 49920")


def test_transpose():
    assert one("transpose", T(F16, 1, 12, 64, 32), perm=[0, 1, 3, 2]) == T(F16, 1, 12, 32, 64)
    assert one("transpose", T(F16, 2, 3, 4), perm=[2, 0, 1]) == T(F16, 4, 2, 3)
    fails("transpose", T(F16, 2, 3), perm=[0, 0], match="transpose perm [0, 0] is not a permutation of 0..1")
    fails("transpose", T(F16, 2, 3), perm=[1, 0, 2], match="transpose perm [1, 0, 2] is not a permutation of 0..1")


def test_slice_python_semantics():
    x = T(F16, 1, 768, 1, 64)
    assert one("slice", x, begin=[0, 0, 0, 0], end=[1, 384, 1, 64]) == T(F16, 1, 384, 1, 64)
    # negative indices count from the end; out-of-range ends clamp
    assert one("slice", x, begin=[0, -256, 0, 0], end=[1, 10000, 1, 64]) == T(F16, 1, 256, 1, 64)
    assert one("slice", x, begin=[0, 0, 0, -10], end=[1, 768, 1, -2]) == T(F16, 1, 768, 1, 8)
    assert one("slice", x, begin=[-100, 0, 0, 0], end=[1, 768, 1, 64], stride=[1, 2, 1, 3]) == T(F16, 1, 384, 1, 22)
    fails("slice", x, begin=[0, 500, 0, 0], end=[1, 400, 1, 64],
          match="slice of dim 1 is empty: begin 500, end 400 on size 768")
    fails("slice", x, begin=[0, 0, 0, 0], end=[1, 768, 1, 64], stride=[1, -1, 1, 1],
          match="slice stride must be positive, got -1 in dim 1")
    fails("slice", x, begin=[0, 0], end=[1, 768, 1, 64],
          match="slice begin has 2 entries but the operand has rank 4", hint="one entry per dim")


def test_split():
    x = T(F16, 1, 2304, 1, 64)
    assert infer("split", x, axis=1, sizes=[768, 768, 768]) == [T(F16, 1, 768, 1, 64)] * 3
    assert infer("split", x, axis=-1, sizes=[60, 4]) == [T(F16, 1, 2304, 1, 60), T(F16, 1, 2304, 1, 4)]
    fails("split", x, axis=1, sizes=[768, 768],
          match="split sizes [768, 768] sum to 1536 but dim 1 of fp16[1, 2304, 1, 64] is 2304")
    fails("split", x, axis=1, sizes=[2304, 0], match="split sizes [2304, 0] must all be positive")
    fails("split", x, axis=5, sizes=[1], match="split axis 5 is out of range for rank 4 (valid: -4..3)")


def test_pad():
    assert one("pad", T(F16, 1, 3, 1, 5), before=[0, 1, 0, 2], after=[0, 0, 0, 3]) == T(F16, 1, 4, 1, 10)
    assert one("pad", T(F32, 2), before=[1], after=[1], value=-1) == T(F32, 4)
    fails("pad", T(F16, 2, 2), before=[0, -1], after=[0, 0], match="pad before [0, -1] has a negative entry")
    fails("pad", T(F16, 2, 2), before=[0], after=[0, 0], match="pad before has 1 entries but the operand has rank 2")


def test_concat():
    a, b = T(F16, 1, 256, 1, 128), T(F16, 1, 128, 1, 128)
    assert one("concat", a, b, axis=1) == T(F16, 1, 384, 1, 128)
    assert one("concat", a, b, a, axis=-3) == T(F16, 1, 640, 1, 128)
    fails("concat", a, b, axis=3, match="concat operands differ in dim 1: fp16[1, 256, 1, 128] vs "
          "fp16[1, 128, 1, 128]", hint="only dim 3")
    fails("concat", a, T(F16, 256, 128), axis=0,
          match="concat operands have different ranks: fp16[1, 256, 1, 128] vs fp16[256, 128]")
    fails("concat", a, T(F32, 1, 256, 1, 128), axis=1, match="concat operands have different dtypes: fp16 vs fp32")


def test_const():
    t = T(F16, 3072, 768, 1, 1)
    assert infer_types("const", [], {}, {"weight": "w"}, declared=t) == [t]
    assert infer_types("const", [], {}, {"value": 1e-5}, declared=T(F16)) == [T(F16)]
    assert infer_types("const", [], {}, {"value": [[1, 2], [3, 4]]}, declared=T(I32, 2, 2)) == [T(I32, 2, 2)]
    assert infer_types("const", [], {}, {"value": 0.5}, declared=T(F32, 2, 3)) == [T(F32, 2, 3)]
    assert infer_types("const", [], {}, {"weight": "w", "perm": [1, 0], "slice": [0, 0, 768]},
                       declared=T(F16, 768, 256, 1, 1)) == [T(F16, 768, 256, 1, 1)]
    fails("const", match="const needs a declared type", weight="w")
    fails("const", declared=t, match="const needs exactly one of weight= or value=")
    fails("const", declared=t, match="const needs exactly one of weight= or value=", weight="w", value=1.0)
    fails("const", declared=T(F16, 2), match="const attribute 'perm' applies to weight consts only",
          value=1.0, perm=[0])
    fails("const", declared=T(F16, 2, 2), match="const value has shape [3] but the declared type is fp16[2, 2]",
          value=[1, 2, 3])
    fails("const", declared=T(I32), match="const value 1.5 is not an integer for a int32 const", value=1.5)
    fails("const", declared=T(DType.int8), match="const value 300 is out of range for int8 (-128..127)", value=300)
    fails("const", declared=T(F16, 2), match="const value is a ragged list", value=[[1], [2, 3]])
    fails("const", declared=t, match="const perm [0, 2] is not a permutation of 0..1", weight="w", perm=[0, 2])
    fails("const", declared=t, match="const slice [0, 5, 5] needs 0 <= start < stop", weight="w", slice=[0, 5, 5])
    fails("const", declared=t, match="const slice must be [axis, start, stop], got [0, 5]", weight="w", slice=[0, 5])
    # a finite value fp16 rounds to inf is an error; one it rounds to 65504 and inf itself are not
    fails("const", declared=T(F16), match="const value 1000000.0 is out of range for fp16 (-65504..65504)", value=1e6)
    assert infer_types("const", [], {}, {"value": 65519.0}, declared=T(F16)) == [T(F16)]
    assert infer_types("const", [], {}, {"value": -math.inf}, declared=T(F16)) == [T(F16)]


def test_format_table_lists_every_op():
    text = ops.format_table()
    md = ops.format_table(markdown=True)
    for name in OPS:
        assert f"\n{name} " in text
        assert f"| `{name}` |" in md
    assert "transpose_x=false, transpose_y=false" in text
    assert "stride=[1, ...]" in text
