"""The sim's compiler: accepted MIL syntax forms and ANE rejections.

Every rejection must name the MIL line and, for device constraints, the
constraint id (RuntimeFailure.constraint).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from anec.ir.ops import OPS, NotOnAne
from anec.runtime import native
from tests.runtime import milkit as mk
from tolerances import assert_close

X = [("x", "fp16", (1, 4, 1, 8))]
SHAPE = (1, 4, 1, 8)


def fails(rt, mil, blobs=None, limits=None):
    with pytest.raises(RuntimeFailure) as ei:
        rt.compile(mil, blobs or {}, limits=limits)
    return ei.value


def line_of(mil: str, needle: str) -> int:
    return next(i for i, line in enumerate(mil.splitlines(), 1) if needle in line)


SIM_REJECTED = [(name, op.lowering.constraint) for name, op in OPS.items()
                if isinstance(op.lowering, NotOnAne) and op.lowering.sim_rejects]
"""Every op row the ANE compiler rejects (the sim refuses its MIL as the device does)."""


@pytest.mark.parametrize("op,cid", SIM_REJECTED)
@pytest.mark.constraint("ANE-CONCAT", "ANE-GELU", "ANE-RSQRT", "ANE-NEG")
def test_rejected_ops_name_constraint_and_line(rt, op, cid):
    args = {"values": "(x, x)", "axis": "ax", "interleave": "il"} if op == "concat" else {"x": "x"}
    body = [mk.const_scalar("ax", "int32", 1), mk.const_scalar("il", "bool", False)]
    shape = (1, 8, 1, 8) if op == "concat" else SHAPE
    body.append(mk.op("y", "fp16", shape, op, **args))
    mil = mk.program(X, body, ["y"])
    e = fails(rt, mil)
    assert e.constraint == cid
    assert f"model.mil:{line_of(mil, ' = ' + op + '(')}:" in e.message
    assert e.code == native.lib.ANEC_ECOMPILE


def test_unknown_and_unimplemented_ops(rt):
    e = fails(rt, mk.program(X, [mk.op("y", "fp16", SHAPE, "frobnicate", x="x")], ["y"]))
    assert "unknown op 'frobnicate'" in e.message and e.constraint is None
    e = fails(rt, mk.program(X, [mk.op("y", "fp16", SHAPE, "layer_norm", x="x")], ["y"]))
    assert "valid MIL but the anec sim does not implement it" in e.message


@pytest.mark.constraint("ANE-CONV-BIAS")
def test_conv_bias_rejected(rt):
    w = np.zeros((4, 4, 1, 1), np.float16)
    b = np.zeros((4,), np.float16)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"), mk.const_tensor("b", b),
            mk.op("y", "fp16", SHAPE, "conv", bias="b", weight="w", x="x")]
    e = fails(rt, mk.program(X, body, ["y"]), {"@model_path/weights/w.bin": mk.blobfile(w)})
    assert e.constraint == "ANE-CONV-BIAS"


@pytest.mark.constraint("ANE-MATMUL-FLAGS")
def test_matmul_inline_flags_rejected_named_accepted(rt):
    y = np.ones((8, 3), np.float16)
    inline = [mk.const_tensor("w", y),
              mk.op("z", "fp16", (1, 4, 1, 3), "matmul", transpose_x="bool(false)", transpose_y="bool(false)", x="x", y="w")]
    e = fails(rt, mk.program(X, inline, ["z"]))
    assert e.constraint == "ANE-MATMUL-FLAGS"
    named = [mk.const_tensor("w", y), mk.const_scalar("f", "bool", False),
             mk.op("z", "fp16", (1, 4, 1, 3), "matmul", transpose_x="f", transpose_y="f", x="x", y="w")]
    rt.compile(mk.program(X, named, ["z"])).close()


@pytest.mark.constraint("ANE-LIVE-OUTPUTS")
def test_live_outputs(rt):
    e = fails(rt, mk.program(X, [mk.op("y", "fp16", SHAPE, "relu", x="x")], ["y", "ghost"]))
    assert e.constraint == "ANE-LIVE-OUTPUTS" and "ghost" in e.message


@pytest.mark.constraint("ANE-CONV-CHANNELS")
def test_conv_channel_limit(rt):
    w = np.zeros((40, 4, 1, 1), np.float16)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"), mk.op("y", "fp16", (1, 40, 1, 8), "conv", weight="w", x="x")]
    mil = mk.program(X, body, ["y"])
    blobs = {"@model_path/weights/w.bin": mk.blobfile(w)}
    e = fails(rt, mil, blobs, mk.limits(max_conv_out_channels=32))
    assert e.constraint == "ANE-CONV-CHANNELS" and "40 output channels" in e.message
    rt.compile(mil, blobs, limits=mk.limits(max_conv_out_channels=40)).close()


def _blob_program(n, scalar):
    body, blobs = [], {}
    acc = "x"
    for i in range(n):
        w = np.full((1, 4, 1, 1), i, np.float16)
        body.append(mk.const_blob(f"w{i}", "fp16", w.shape, f"w{i}.bin"))
        body.append(mk.op(f"a{i}", "fp16", SHAPE, "add", x=acc, y=f"w{i}"))
        blobs[f"@model_path/weights/w{i}.bin"] = mk.blobfile(w)
        acc = f"a{i}"
    if scalar:
        body += [mk.const_scalar("c", "fp16", 2.0), mk.op("m", "fp16", SHAPE, "mul", x=acc, y="c")]
        acc = "m"
    return mk.program(X, body, [acc]), blobs


@pytest.mark.constraint("ANE-BLOB-BUDGET")
def test_blob_budget_and_scalar_penalty(rt):
    mil, blobs = _blob_program(16, scalar=False)
    rt.compile(mil, blobs).close()
    mil, blobs = _blob_program(17, scalar=False)
    e = fails(rt, mil, blobs)
    assert e.constraint == "ANE-BLOB-BUDGET" and "at most 16" in e.message
    mil, blobs = _blob_program(16, scalar=True)
    e = fails(rt, mil, blobs)
    assert e.constraint == "ANE-BLOB-BUDGET" and "at most 15" in e.message and "scalar" in e.message
    mil, blobs = _blob_program(15, scalar=True)
    rt.compile(mil, blobs).close()


@pytest.mark.constraint("ANE-FP32-IO")
def test_fp32_io_rejected_when_not_allowed(rt):
    mil = mk.program([("x", "fp32", SHAPE)], [mk.op("y", "fp32", SHAPE, "relu", x="x")], ["y"])
    e = fails(rt, mil, limits=mk.limits(allow_fp32_io=False))
    assert e.constraint == "ANE-FP32-IO"
    rt.compile(mil, limits=mk.limits(allow_fp32_io=True)).close()


@pytest.mark.parametrize("decl", ["tensor<fp16, [1, 4, 1, 9]>", "tensor<fp32, [1, 4, 1, 8]>", "tensor<fp16, [4, 8]>"])
def test_declared_type_must_match_inference(rt, decl):
    mil = mk.program(X, [f'{decl} y = relu(x = x)[name = string("y")];'], ["y"])
    e = fails(rt, mil)
    assert "is declared" in e.message and "the op produces tensor<fp16, [1, 4, 1, 8]>" in e.message
    assert f"model.mil:{line_of(mil, 'relu')}" in e.message


@pytest.mark.parametrize("text,msg", [
    ("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [4]> x) {\n        tensor<fp16, [4]> y = relu(x = x)\n    } -> (y);\n}\n",
     "model.mil:5:5: expected ';'"),
    ("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [4]> x) {\n    } -> (y)\n", "expected"),
    ("prog(1.3) {}", "model.mil:1:1: expected 'program"),
    ('program(1.3)\n{\n func main(tensor<fp16, [?]> x) { } -> (x);\n}', "dynamic dimension"),
    ('program(1.3)\n{\n func main(tensor<fp16, [4]> x) {\n  string s = const()[val = string("abc)];\n } -> (x);\n}',
     "unterminated string"),
])
def test_parse_errors_have_line_and_column(rt, text, msg):
    e = fails(rt, text)
    assert e.code == native.lib.ANEC_EPARSE
    assert msg in e.message


def test_accepts_dialects_and_syntax_forms(rt):
    """ios16 dialect, no spaces around '=', decimal/hex/inf floats, inline literals, tuples, comments."""
    mil = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios16>(tensor<fp16, [1, 4, 1, 8]> x) {
        // a comment line
        tensor<string, []> d=const()[name=tensor<string, []>("d"), val=tensor<string, []>("fp32")];
        tensor<fp16, []> c = const()[name = tensor<string, []>("c"), val = tensor<fp16, []>(0x1.8p-1)];
        fp16 big = const()[name=string("big"), val=fp16(inf)];
        fp32 dec = const()[name=string("dec"), val=fp32(2.5e-1)];
        tensor<fp16, [1, 4, 1, 8]> a=mul(x=x,y=c)[name=string("a")];
        tensor<fp16, [1, 4, 1, 8]> m = add(x = a, y = fp16(-0x1p+0))[name = string("m")];
        tensor<fp16, [1, 4, 1, 8]> r = reduce_max(x = m, axes = tensor<int32, [1]>([0]), keep_dims = bool(true))[name = string("r")];
        tensor<fp32, [1, 4, 1, 8]> y = cast(dtype = d, x = r)[name = string("y")];
    } -> (y);
}
"""
    x = np.linspace(-2, 2, 32, dtype=np.float16).reshape(SHAPE)
    prog = rt.compile(mil)
    y = prog(x=x)["y"]
    prog.close()
    ref = (x.astype(np.float32) * np.float16(0.75).astype(np.float32)).astype(np.float16).astype(np.float32) - 1
    assert_close(y, ref.astype(np.float16).astype(np.float32), "sim-mil/dialects-and-syntax", 1)


def test_multiple_funcs_pick_main(rt):
    one = mk.program(X, [mk.op("y", "fp16", SHAPE, "relu", x="x")], ["y"])
    body = one[one.index("    func"):one.rindex("}")]
    other = body.replace("func main", "func other").replace("relu", "exp")
    mil = one[:one.index("    func")] + other + body + "}\n"
    x = -np.ones(SHAPE, np.float16)
    prog = rt.compile(mil)
    np.testing.assert_array_equal(prog(x=x)["y"], np.zeros(SHAPE, np.float16))
    prog.close()


def test_bad_arguments_rejected(rt):
    e = fails(rt, mk.program(X, [mk.op("y", "fp16", SHAPE, "relu", x="x", alpha="x")], ["y"]))
    assert "has no argument 'alpha'" in e.message
    e = fails(rt, mk.program(X, [mk.op("y", "fp16", SHAPE, "relu", x="nothere")], ["y"]))
    assert "undefined name" in e.message
    e = fails(rt, mk.program(X, [mk.op("x", "fp16", SHAPE, "relu", x="x")], ["x"]))
    assert "defined twice" in e.message
    body = [mk.op("s", "fp16", SHAPE, "relu", x="x"), mk.op("y", "fp16", SHAPE, "transpose", perm="s", x="x")]
    e = fails(rt, mk.program(X, body, ["y"]))
    assert "must be a const" in e.message


def test_blobfile_problems_at_compile(rt):
    w = np.ones((4, 4, 1, 1), np.float16)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"), mk.op("y", "fp16", SHAPE, "conv", weight="w", x="x")]
    mil = mk.program(X, body, ["y"])
    e = fails(rt, mil, {})
    assert "not given" in e.message and "@model_path/weights/w.bin" in e.message
    e = fails(rt, mil, {"@model_path/weights/w.bin": mk.blobfile(w.astype(np.float32))})
    assert e.code == native.lib.ANEC_EWEIGHTS and "fp32" in e.message
    e = fails(rt, mil.replace("offset = uint64(64)", "offset = uint64(128)"), {"@model_path/weights/w.bin": mk.blobfile(w)})
    assert "outside the file" in e.message
    bad = bytearray(mk.blobfile(w))
    bad[64:68] = b"\0\0\0\0"
    e = fails(rt, mil, {"@model_path/weights/w.bin": bytes(bad)})
    assert "sentinel" in e.message
    e = fails(rt, mil.replace("@model_path/weights/w.bin", "@model_path/../w.bin"),
              {"@model_path/../w.bin": mk.blobfile(w)})
    assert "relative path" in e.message


@pytest.mark.constraint("ANE-IO-TENSORS")
def test_scalar_and_integer_io_rejected(rt):
    # a scalar output (reduce over every axis) and an int32 input: the ANE binds fp16/fp32 tensors only
    body = [mk.const_tensor("ax", np.array([0, 1, 2, 3], np.int32)), mk.const_scalar("kd", "bool", False),
            mk.op("s", "fp16", (), "reduce_sum", axes="ax", keep_dims="kd", x="x")]
    e = fails(rt, mk.program(X, body, ["s"]))
    assert e.constraint == "ANE-IO-TENSORS" and "returned 's'" in e.message
    e = fails(rt, mk.program([("i", "int32", SHAPE)], [mk.op("y", "int32", SHAPE, "identity", x="i")], ["y"]))
    assert e.constraint == "ANE-IO-TENSORS" and "input 'i'" in e.message
