"""Unit tests of the MIL emitter: spelling, names, params, weights, refusals."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from anec.diagnostics import ConstraintError
from anec.ir import Builder
from anec.ir.ops import OPS, NotOnAne
from anec.ir.types import DType
from anec.mil.emitter import emit_mil, is_mil_identifier
from anec.mil.float_literals import float_literal
from anec.targets import get_target

from .graphs import small_mlp, two_io
from .milcheck import parse_mil


def test_float_literal_spellings():
    """%g-style decimals with the digits the value needs (the exhaustive proof is in
    test_mil_literals.py)."""
    fp16, fp32 = DType.fp16, DType.fp32
    assert float_literal(1.0, fp16) == "1"
    assert float_literal(-10.0, fp16) == "-10"
    assert float_literal(0.0, fp16) == "0"
    assert float_literal(-0.0, fp16) == "-0.0"
    assert float_literal(0.75, fp16) == "0.75"
    assert float_literal(float(np.float16(1e-5)), fp16) == "1e-05"
    assert float_literal(float(np.float16(0.1)), fp16) == "0.1"
    assert float_literal(65504.0, fp16) == "65500"  # the shortest decimal that rounds to it
    assert float_literal(float(np.float32(0.1)), fp32) == "0.1"
    assert float_literal(float(np.float32(1 / 3)), fp32) == "0.33333334"
    assert float_literal(float(np.finfo(np.float32).max), fp32) == "3.4028235e+38"
    assert float_literal(float(np.finfo(np.float32).smallest_subnormal), fp32) == "1e-45"
    assert float_literal(123456792.0, fp32) == "1.2345679e+08"
    assert (float_literal(math.inf, fp16), float_literal(-math.inf, fp32),
            float_literal(math.nan, fp16)) == ("inf", "-inf", "nan")


def test_float_literal_refuses_values_the_dtype_cannot_hold():
    with pytest.raises(ValueError, match="not a fp16 value"):
        float_literal(0.1, DType.fp16)  # 0.1 in fp64 is not an fp16 value
    with pytest.raises(ValueError, match="not a int32 value"):
        float_literal(1.0, DType.int32)


def test_program_layout(m4):
    text = emit_mil(small_mlp(), m4).text
    lines = text.split("\n")
    assert lines[0] == "program(1.3)"
    assert lines[1].startswith("[buildInfo = dict<string, string>({{\"coremlc-component-MIL\"")
    assert lines[2] == "{"
    assert lines[3] == "    func main<ios18>(tensor<fp32, [1, 8, 1, 4]> x) {"
    assert lines[-3] == "    } -> (y);" and lines[-2] == "}" and lines[-1] == ""
    body = lines[4:-3]
    assert body and all(line.startswith("        ") and line.endswith("];") for line in body)
    for line in body:  # keyword arguments sorted
        m = re.search(r"= \w+\((.*)\)\[name", line)
        keys = re.findall(r"(\w+) = ", m.group(1))
        assert keys == sorted(keys), line


@pytest.mark.constraint("ANE-MATMUL-FLAGS")
def test_every_param_is_a_named_const(m4):
    mil = parse_mil(emit_mil(small_mlp(), m4).text)
    consts = {s.results[0][1]: s for s in mil.stmts if s.op == "const"}
    conv = next(s for s in mil.stmts if s.op == "conv")
    assert conv.args == {"dilations": "h_dilations", "groups": "h_groups", "pad": "h_pad",
                         "pad_type": "h_pad_type", "strides": "h_strides", "weight": "w1", "x": "xh"}
    assert consts["h_pad_type"].val.value == "valid"
    assert consts["h_groups"].val.type.dtype == "int32"
    cast = next(s for s in mil.stmts if s.op == "cast")
    assert consts[cast.args["dtype"]].val.value == "fp16"
    assert "bias" not in conv.args


def test_scalar_and_small_tensor_literals(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 1, 1, 4])
    c = b.const_value(0.75, "fp16[]", name="c")
    v = b.const_value([1.0, -2.5, 0.0, 65504.0], "fp16[4]", name="v")
    f = b.const_value(0.1, "fp32[]", name="f")
    y = b.add(b.mul(x, c, name="xc"), v, name="y")
    xf = b.cast(y, dtype="fp32", name="yf")
    z = b.add(xf, f, name="z")
    b.ret(z)
    text = emit_mil(b.graph, m4).text
    assert 'fp16 c = const()[name = string("c"), val = fp16(0.75)];' in text
    assert ("tensor<fp16, [4]> v = const()[name = string(\"v\"), "
            "val = tensor<fp16, [4]>([1, -2.5, 0, 65500])];") in text
    # fp32 scalars are exact: 0.1f reads back from "0.1" as fp32 (no 6-digit %g rounding)
    assert "val = fp32(0.1)" in text
    assert "0x" not in text


@pytest.mark.constraint("ANE-MATMUL-FLAGS")
def test_matmul_flags_are_bool_consts(m4):
    b = Builder("f")
    q = b.input("q", "fp16", [1, 2, 8, 4])
    k = b.input("k", "fp16", [1, 2, 8, 4])
    s = b.matmul(q, k, transpose_y=True, name="s")
    b.ret(s)
    text = emit_mil(b.graph, m4).text
    assert 'bool s_transpose_x = const()[name = string("s_transpose_x"), val = bool(false)];' in text
    assert 'bool s_transpose_y = const()[name = string("s_transpose_y"), val = bool(true)];' in text
    assert "matmul(transpose_x = s_transpose_x, transpose_y = s_transpose_y, x = q, y = k)" in text


def _pad_graph(before, after, value=0.0, dtype="fp16"):
    b = Builder("f")
    x = b.input("x", dtype, [1, 3, 4, 5])
    p = b.pad(x, before=before, after=after, value=value, name="p")
    b.ret(p)
    return b.graph


@pytest.mark.parametrize(
    "before, after, want",
    [
        ([0, 0, 0, 1], [0, 0, 0, 2], [1, 2]),
        ([0, 0, 1, 0], [0, 0, 0, 3], [1, 0, 0, 3]),
        ([0, 2, 0, 0], [0, 1, 0, 0], [2, 1, 0, 0, 0, 0]),
        ([1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0]),
        ([0, 0, 0, 0], [0, 0, 0, 0], [0, 0]),
    ],
)
def test_pad_layout(m4, before, after, want):
    mil = parse_mil(emit_mil(_pad_graph(before, after, value=-1.5), m4).text)
    consts = {s.results[0][1]: s.val for s in mil.stmts if s.op == "const"}
    assert consts["p_pad"].value == want
    assert consts["p_mode"].value == "constant"
    assert consts["p_constant_val"].type.dtype == "fp16" and consts["p_constant_val"].value == -1.5


def test_slice_bounds_are_resolved(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 10])
    s = b.slice(x, begin=[0, -3, 0, 2], end=[1, 100, 1, -1], stride=[1, 2, 1, 3], name="s")
    b.ret(s)
    consts = {s.results[0][1]: s.val.value for s in parse_mil(emit_mil(b.graph, m4).text).stmts
              if s.op == "const"}
    assert consts["s_begin"] == [0, 5, 0, 2]
    assert consts["s_end"] == [1, 8, 1, 9]
    assert consts["s_stride"] == [1, 2, 1, 3]


def test_slice_stride_beyond_the_dim_is_written_as_the_dim(m4):
    """Any stride >= the dim takes the element at begin alone; MIL strides are int32."""
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 10])
    s = b.slice(x, begin=[0, 3, 0, 0], end=[1, 8, 1, 10], stride=[1, 2**31, 5, 1], name="s")
    b.ret(s)
    text = emit_mil(b.graph, m4).text
    assert ('tensor<int32, [4]> s_stride = const()[name = string("s_stride"), '
            'val = tensor<int32, [4]>([1, 8, 1, 1])];') in text
    assert "tensor<fp16, [1, 1, 1, 10]> s = slice_by_index(" in text


def test_negative_axes_are_made_non_negative(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 6, 1, 4])
    r = b.reduce_sum(x, axes=[-1, 1], keep_dims=True, name="r")
    sm = b.softmax(x, axis=-1, name="sm")
    b.ret(r, sm)
    text = emit_mil(b.graph, m4).text
    assert "tensor<int32, [2]>([3, 1])" in text
    assert 'int32 sm_axis = const()[name = string("sm_axis"), val = int32(3)];' in text


@pytest.mark.constraint("ANE-SPLIT")
def test_split_is_refused(m4):
    """Legalize turns split into slices; a split reaching the emitter is an error."""
    b = Builder("f")
    x = b.input("x", "fp16", [1, 6, 1, 4])
    a, c = b.split(x, axis=-3, sizes=[2, 4], names=["a", "c"])
    b.ret(b.relu(a, name="ra"), b.relu(c, name="rc"))
    with pytest.raises(ConstraintError) as e:
        emit_mil(b.graph, m4)
    assert e.value.constraint == "ANE-SPLIT" and "legalize" in e.value.hint


@pytest.mark.parametrize("shape", [[8], [2, 4], [1, 2, 4], [1, 1, 2, 1, 4], []])
@pytest.mark.parametrize("where", ["input", "output"])
@pytest.mark.constraint("ANE-IO-RANK4")
def test_io_rank_other_than_4_is_refused(m4, shape, where):
    b = Builder("f")
    if where == "input":
        x = b.input("x", "fp16", shape)
        y = b.reshape(x, shape=[1, 1, 1, -1], name="y")
    else:
        x = b.input("x", "fp16", [1, 1, 1, max(1, math.prod(shape))])
        y = b.reshape(x, shape=shape, name="y")
    b.ret(y)
    with pytest.raises(ConstraintError) as e:
        emit_mil(b.graph, m4)
    assert e.value.constraint == "ANE-IO-RANK4"
    assert f"{where} %{'x' if where == 'input' else 'y'}" in e.value.message
    assert "legalize" in e.value.hint


def test_reshape_uses_the_resolved_shape(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 6])
    r = b.reshape(x, shape=[1, 2, -1, 6], name="r")
    b.ret(r)
    assert "tensor<int32, [4]>([1, 2, 4, 6])" in emit_mil(b.graph, m4).text


# ---- names ------------------------------------------------------------------


def test_io_names_preserved_and_helpers_never_collide(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4, 1, 4])
    w = b.const_weight("w", "fp16[4, 4, 1, 1]", name="w")
    # user values named exactly like the conv's helper consts
    h_strides = b.relu(x, name="h_strides")
    h = b.conv1x1(h_strides, w, name="h")
    h_pad = b.add(h, h, name="h_pad")
    b.ret(h_pad)
    prog = emit_mil(b.graph, m4)
    mil = parse_mil(prog.text)
    names = [n for s in mil.stmts for _, n in s.results]
    assert len(names) == len(set(names))
    assert {"h_strides", "h_pad", "h"} <= set(names)
    conv = next(s for s in mil.stmts if s.op == "conv")
    assert conv.args["strides"] == "h_strides_1" and conv.args["pad"] == "h_pad_1"
    assert conv.args["x"] == "h_strides"
    assert mil.inputs[0][1] == "x" and mil.outputs == ["h_pad"]


def test_internal_names_are_sanitized(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 1, 1, 4])
    a = b.relu(x, name="0")
    c = b.tanh(a, name="fp16")
    d = b.exp(c, name="v0")  # the sanitized name of %0 is taken: it gets a suffix
    y = b.add(d, a, name="y")
    b.ret(y)
    prog = emit_mil(b.graph, m4)
    assert prog.names["v0"] == "v0" and prog.names["0"] == "v0_1" and prog.names["fp16"] == "fp16_"
    assert all(is_mil_identifier(n) for n in prog.names.values())
    parse_mil(prog.text)


@pytest.mark.parametrize("bad", ["0", "bool", "tensor"])
def test_invalid_io_name_is_an_error(m4, bad):
    b = Builder("f")
    x = b.input(bad, "fp16", [1, 4])
    y = b.relu(x, name="y")
    b.ret(y)
    with pytest.raises(ConstraintError) as e:
        emit_mil(b.graph, m4)
    assert e.value.constraint == "ANE-IO-ORDER" and f"'{bad}'" in e.value.message
    assert "rename" in e.value.hint


def test_returning_an_input_is_an_error(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4])
    b.ret(x)
    with pytest.raises(ConstraintError) as e:
        emit_mil(b.graph, m4)
    assert e.value.constraint == "ANE-LIVE-OUTPUTS" and "identity" in e.value.hint


# ---- refusals ---------------------------------------------------------------


def _with_op(op, **kw):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4, 1, 4])
    if op == "concat":
        y = b.concat(x, x, axis=1, name="y")
    elif op == "conv_bias":
        w = b.const_weight("w", "fp16[4, 4, 1, 1]", name="w")
        bias = b.const_weight("b", "fp16[1, 4, 1, 1]", name="bias")
        y = b.conv1x1(x, w, bias=bias, name="y")
    else:
        y = b.op(op, x, name="y", **kw)
    b.ret(y)
    return b.graph


@pytest.mark.parametrize(
    "op, cid",
    # every op row the ANE compiler rejects, and the rejected conv bias=
    [(name, op.lowering.constraint) for name, op in OPS.items()
     if isinstance(op.lowering, NotOnAne) and op.lowering.sim_rejects] + [("conv_bias", "ANE-CONV-BIAS")],
)
def test_unlegalized_ops_are_refused(m4, op, cid):
    with pytest.raises(ConstraintError) as e:
        emit_mil(_with_op(op), m4)
    assert e.value.constraint == cid
    assert "legalize" in e.value.hint


def test_fp32_io_refused_without_device_casts():
    with pytest.raises(ConstraintError) as e:
        emit_mil(small_mlp(), get_target("m1"))
    assert e.value.constraint == "ANE-FP32-IO" and "--host-casts" in e.value.hint


def test_packed_weights_refused_on_one_file_targets():
    with pytest.raises(ConstraintError) as e:
        emit_mil(two_io(), get_target("m1"), pack_weights=True)
    assert e.value.constraint == "ANE-ONE-FILE-PER-WEIGHT"


def test_bool_weight_refused(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 1, 1, 4])
    w = b.const_weight("m", "bool[1, 4]", name="m")
    c = b.cast(w, dtype="fp16", name="mc")
    y = b.mul(x, c, name="y")
    b.ret(y)
    with pytest.raises(ConstraintError, match="bool"):
        emit_mil(b.graph, m4)


# ---- weights ----------------------------------------------------------------


@pytest.mark.constraint("ANE-ONE-FILE-PER-WEIGHT")
def test_one_file_per_weight(m4):
    prog = emit_mil(small_mlp(), m4)
    assert [(w.const, w.key, w.file, w.offset) for w in prog.weights] == [
        ("w1", "l0.w1", "weights/w1.bin", 64), ("w2", "l0.w2", "weights/w2.bin", 64)]
    assert ('tensor<fp16, [16, 8, 1, 1]> w1 = const()[name = string("w1"), val = tensor<fp16, [16, 8, 1, 1]>'
            '(BLOBFILE(path = string("@model_path/weights/w1.bin"), offset = uint64(64)))];') in prog.text


@pytest.mark.constraint("ANE-BLOBFILE-OFFSET")
def test_packed_weights_offsets(m4):
    prog = emit_mil(small_mlp(channels=8, hidden=10), m4, pack_weights=True)
    # w1: 10*8 fp16 = 160 bytes at 64 -> payload [128, 288) -> next record at 320
    assert [(w.file, w.offset) for w in prog.weights] == [("weights/weight.bin", 64), ("weights/weight.bin", 320)]
    assert 'offset = uint64(320)' in prog.text


def test_weight_file_names_unique_ignoring_case(m4):
    b = Builder("f")
    x = b.input("x", "fp16", [1, 4, 1, 4])
    w_up = b.const_weight("a", "fp16[4, 4, 1, 1]", name="W")
    w_lo = b.const_weight("b", "fp16[4, 4, 1, 1]", name="w")
    y = b.add(b.conv1x1(x, w_up, name="p"), b.conv1x1(x, w_lo, name="q"), name="y")
    b.ret(y)
    assert [w.file for w in emit_mil(b.graph, m4).weights] == ["weights/W.bin", "weights/w_1.bin"]


def test_deterministic(m4):
    g = small_mlp()
    assert emit_mil(g, m4).text == emit_mil(g.clone(), m4).text == emit_mil(small_mlp(), m4).text


@pytest.mark.constraint("ANE-MIL-DIALECT")
def test_ios16_dialect():
    old = get_target("m2").replace(mil_dialect="ios16")  # what --dialect ios16 selects
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 4])
    w = b.const_weight("w", "fp16[8, 8, 1, 1]", name="w")
    c = b.const_value(1.0, "fp16[]", name="one")
    y = b.add(b.conv1x1(x, w, name="h"), c, name="y")
    b.ret(y)
    text = emit_mil(b.graph, old).text
    lines = text.split("\n")
    assert lines[0] == "program(1.0)"
    assert lines[1] == '[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]'
    assert lines[3] == "    func main<ios16>(tensor<fp16, [1, 8, 1, 4]> x) {"
    assert ('tensor<string, []> h_pad_type = const()[name = tensor<string, []>("h_pad_type"), '
            'val = tensor<string, []>("valid")];') in text
    assert 'tensor<fp16, []> one = const()[name = tensor<string, []>("one"), val = tensor<fp16, []>(1)];' in text
    assert 'offset = tensor<uint64, []>(64)' in text
    assert "string(" not in text.replace("tensor<string, []>(", "")


def test_emit_mil_docstring_example_is_real(m4):
    """The Before/After of the EmitMil docstring is what the emitter writes."""
    import inspect

    from anec.ir.parser import parse
    from anec.passes.emit_mil import EmitMil

    doc = inspect.getdoc(EmitMil)
    before = doc.split("Before::")[1].split("After")[0]
    after = doc.split("manifest.json``)::")[1]
    graph = parse(inspect.cleandoc(before)).func("mlp")
    text = emit_mil(graph, m4).text
    assert text == inspect.cleandoc(after) + "\n"  # the whole text, buildInfo included
