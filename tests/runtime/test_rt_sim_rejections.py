"""The sim's compiler refuses each malformed op (csrc/sim_rules.c, csrc/sim_plan.c).

One case per check: the smallest program that breaks it, the message it must give and the
MIL line it must name; and where the check has a boundary, the program just inside it
compiles. Last, two things the rules resolve that no other sim test tells apart: where the
odd pad of `same` and `same_lower` goes, and the element type of a matmul of a const x. (The IR layer checks the same rules before MIL is written; these cases are the
sim's own checks, for MIL that did not come from anec.)
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from tests.runtime import milkit as mk

SHAPE = (1, 4, 1, 8)
X = [("x", "fp16", SHAPE)]
W_BIN = "@model_path/weights/w.bin"


def blob_weight(shape) -> tuple[str, dict]:
    w = np.zeros(shape, np.float16)
    return mk.const_blob("w", "fp16", shape, "w.bin"), {W_BIN: mk.blobfile(w)}


def conv(out_shape, wshape, **params):
    line, blobs = blob_weight(wshape)
    consts = [mk.const_ints(k, v) if isinstance(v, list) else mk.const_scalar(k, "int32", v)
              for k, v in params.items()]
    args = {k: k for k in params}
    return [line, *consts, mk.op("y", "fp16", out_shape, "conv", weight="w", x="x", **args)], blobs


def case(body, needle, *, inputs=X, outputs=("y",), blobs=None, limits=None, at="y"):
    return body, needle, inputs, list(outputs), blobs or {}, limits, at


def _cases():
    c = {}
    c["binary element types"] = case(
        [mk.const_tensor("c", np.ones(SHAPE, np.float32)), mk.op("y", "fp16", SHAPE, "add", x="x", y="c")],
        "x and y must have the same element type")
    body, blobs = blob_weight((4, 4, 1))
    c["conv weight rank"] = case([body, mk.op("y", "fp16", SHAPE, "conv", weight="w", x="x")],
                                 "x and weight of rank 4", blobs=blobs)
    body, blobs = conv((1, 6, 1, 8), (6, 1, 1, 1), groups=4)
    c["conv groups divide the output channels"] = case(body, "groups = 4", blobs=blobs)
    body, blobs = conv((1, 4, 1, 1), (4, 4, 1, 9))
    c["conv kernel wider than the input"] = case(body, "kernel larger than the padded input", blobs=blobs)
    c["matmul inner dimensions"] = case(
        [mk.const_tensor("m", np.ones((5, 3), np.float16)), mk.const_scalar("f", "bool", False),
         mk.op("y", "fp16", (1, 4, 1, 3), "matmul", transpose_x="f", transpose_y="f", x="x", y="m")],
        "inner dimensions differ (8 vs 5)")
    c["reduce axis given twice"] = case(
        [mk.const_ints("ax", [1, -3]), mk.op("y", "fp16", (1, 1, 8), "reduce_sum", axes="ax", x="x")],
        "axis 1 given twice")
    c["reshape with two -1"] = case(
        [mk.const_ints("s", [-1, -1]), mk.op("y", "fp16", (4, 8), "reshape", shape="s", x="x")],
        "at most one -1")
    c["reshape to fewer elements"] = case(
        [mk.const_ints("s", [1, 4, 4]), mk.op("y", "fp16", (1, 4, 4), "reshape", shape="s", x="x")],
        "cannot reshape")
    c["transpose perm repeats an axis"] = case(
        [mk.const_ints("p", [0, 1, 1, 3]), mk.op("y", "fp16", SHAPE, "transpose", perm="p", x="x")],
        "perm is not a permutation")
    c["empty slice"] = case(
        [mk.const_ints("b", [0, 0, 0, 4]), mk.const_ints("e", [1, 4, 1, 4]),
         mk.op("y", "fp16", (1, 4, 1, 1), "slice_by_index", begin="b", end="e", x="x")],
        "empty slice along dimension 3")
    c["slice_by_size past the end"] = case(
        [mk.const_ints("b", [0, 0, 0, 4]), mk.const_ints("s", [1, 4, 1, 5]),
         mk.op("y", "fp16", (1, 4, 1, 5), "slice_by_size", begin="b", size="s", x="x")],
        "window [4, 9) is outside dimension 3")
    c["split sizes short of the dimension"] = case(
        [mk.const_scalar("ax", "int32", 3), mk.const_ints("sz", [3, 4]),
         "(tensor<fp16, [1, 4, 1, 3]> a, tensor<fp16, [1, 4, 1, 4]> b) = split(axis = ax, split_sizes = sz, x = x)"
         '[name = string("s")];'],
        "split_sizes sum to 7 but dimension 3 has size 8", outputs=("a", "b"), at="split(")
    c["num_splits that does not divide"] = case(
        [mk.const_scalar("ax", "int32", 3), mk.const_scalar("n", "int32", 3),
         "(tensor<fp16, [1, 4, 1, 3]> a, tensor<fp16, [1, 4, 1, 3]> b, tensor<fp16, [1, 4, 1, 2]> d) = "
         'split(axis = ax, num_splits = n, x = x)[name = string("s")];'],
        "num_splits = 3 does not divide dimension 3 of size 8", outputs=("a", "b", "d"), at="num_splits = n")
    c["pad mode other than constant"] = case(
        [mk.const_ints("p", [0, 1]), mk.const_scalar("m", "string", "reflect"),
         mk.op("y", "fp16", (1, 4, 1, 9), "pad", mode="m", pad="p", x="x")],
        'mode "reflect" is not supported')
    c["negative pad after"] = case(
        [mk.const_ints("p", [0, -1]), mk.op("y", "fp16", (1, 4, 1, 7), "pad", pad="p", x="x")],
        "negative padding is not supported")
    c["cast to an unknown dtype"] = case(
        [mk.const_scalar("d", "string", "int16"), mk.op("y", "fp16", SHAPE, "cast", dtype="d", x="x")],
        'unsupported dtype "int16"')
    c["function without inputs"] = case(
        [mk.const_tensor("c", np.ones(SHAPE, np.float16)), mk.op("y", "fp16", SHAPE, "relu", x="c")],
        "has no inputs", inputs=[], at="func main")
    c["a value returned twice"] = case([mk.op("y", "fp16", SHAPE, "relu", x="x")], "'y' is returned twice",
                                       outputs=("y", "y"), at="} -> (")
    c["fractional int32 literal"] = case(
        ['tensor<int32, [2]> k = const()[name = string("k"), val = tensor<int32, [2]>([0x1.8p+0, 0x1p+1])];',
         mk.op("y", "fp16", SHAPE, "relu", x="x")],
        "is not an int32", at="tensor<int32, [2]> k")
    c["axis equal to the rank"] = case(
        [mk.const_scalar("a", "int32", 4), mk.op("y", "fp16", SHAPE, "softmax", axis="a", x="x")],
        "axis 4 is out of range for rank 4")
    c["fp32 output without fp32 I/O"] = case(
        [mk.const_scalar("d", "string", "fp32"), mk.op("y", "fp32", SHAPE, "cast", dtype="d", x="x")],
        "output 'y' is fp32", limits=mk.limits(allow_fp32_io=False), at="} -> (")
    c["fp32 input without fp32 I/O"] = case(
        [mk.const_scalar("d", "string", "fp16"), mk.op("y", "fp16", SHAPE, "cast", dtype="d", x="x")],
        "input 'x' is fp32", inputs=[("x", "fp32", SHAPE)], limits=mk.limits(allow_fp32_io=False), at="func main")
    c["integer input"] = case([mk.op("y", "fp16", SHAPE, "relu", x="x")], "ANE inputs are fp16 or fp32",
                              inputs=[("x", "int32", SHAPE)], at="func main")
    c["scalar output"] = case(
        [mk.const_ints("ax", [0, 1, 2, 3]), mk.op("y", "fp16", (), "reduce_sum", axes="ax", x="x")],
        "returned 'y' has type fp16", at="} -> (")
    return c


CASES = _cases()


def line_of(mil: str, needle: str) -> int:
    return next(i for i, line in enumerate(mil.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_message_and_line(rt, name):
    body, needle, inputs, outputs, blobs, limits, at = CASES[name]
    mil = mk.program(inputs, body, outputs)
    with pytest.raises(RuntimeFailure) as ei:
        rt.compile(mil, blobs, limits=limits)
    msg = ei.value.message
    assert needle in msg
    at = f" {at} = " if at == "y" else at
    assert f"model.mil:{line_of(mil, at)}" in msg, msg


INSIDE = {
    "kernel as wide as the input": conv((1, 4, 1, 1), (4, 4, 1, 8)),
    "groups that divide both channel counts": conv((1, 8, 1, 8), (8, 1, 1, 1), groups=4),
    "slice_by_size window that ends at the end": (
        [mk.const_ints("b", [0, 0, 0, 4]), mk.const_ints("s", [1, 4, 1, 4]),
         mk.op("y", "fp16", (1, 4, 1, 4), "slice_by_size", begin="b", size="s", x="x")], {}),
    "the last axis": ([mk.const_scalar("a", "int32", 3), mk.op("y", "fp16", SHAPE, "softmax", axis="a", x="x")], {}),
}


@pytest.mark.parametrize("name", list(INSIDE))
def test_just_inside_the_checks_compiles(rt, name):
    """The programs at the checks' boundaries compile: the checks refuse only what they name."""
    body, blobs = INSIDE[name]
    rt.compile(mk.program(X, body, ["y"]), blobs).close()


def test_conv_channel_limit_is_inclusive(rt):
    body, blobs = conv((1, 40, 1, 8), (40, 4, 1, 1))
    mil = mk.program(X, body, ["y"])
    with pytest.raises(RuntimeFailure) as ei:
        rt.compile(mil, blobs, limits=mk.limits(max_conv_out_channels=39))
    assert ei.value.constraint == "ANE-CONV-CHANNELS" and "40 output channels, above the limit of 39" in ei.value.message
    rt.compile(mil, blobs, limits=mk.limits(max_conv_out_channels=40)).close()


def test_a_scalar_const_as_x_lowers_the_blob_budget(rt):
    """The scalar penalty (ANE-BLOB-BUDGET) counts a scalar const operand on either side."""
    body, blobs, acc = [], {}, "x"
    for i in range(16):
        w = np.full((1, 4, 1, 1), i, np.float16)
        body += [mk.const_blob(f"w{i}", "fp16", w.shape, f"w{i}.bin"), mk.op(f"a{i}", "fp16", SHAPE, "add", x=acc, y=f"w{i}")]
        blobs[f"@model_path/weights/w{i}.bin"] = mk.blobfile(w)
        acc = f"a{i}"
    body += [mk.const_scalar("c", "fp16", 2.0), mk.op("m", "fp16", SHAPE, "mul", x="c", y=acc)]
    with pytest.raises(RuntimeFailure) as ei:
        rt.compile(mk.program(X, body, ["m"]), blobs)
    assert ei.value.constraint == "ANE-BLOB-BUDGET" and "at most 15" in ei.value.message and "scalar" in ei.value.message


@pytest.mark.parametrize("pad_type,shift", [("same", 0), ("same_lower", 1)])
def test_conv_same_pads_after_same_lower_before(rt, pad_type, shift):
    """A kernel of width 2 needs one pad column: `same` puts it after the input, `same_lower`
    before. With the weight [1, 0] each output is the input at its kernel's first tap: the
    input itself under `same`, shifted right by one (a zero first) under `same_lower`."""
    x = np.arange(1, 9, dtype=np.float16).reshape(1, 1, 1, 8)
    w = np.array([1, 0], np.float16).reshape(1, 1, 1, 2)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"), mk.const_scalar("pt", "string", pad_type),
            mk.op("y", "fp16", x.shape, "conv", pad_type="pt", weight="w", x="x")]
    prog = rt.compile(mk.program([("x", "fp16", x.shape)], body, ["y"]), {W_BIN: mk.blobfile(w)})
    try:
        y = prog(x=x)["y"].reshape(-1)
    finally:
        prog.close()
    want = np.concatenate([np.zeros(shift, np.float16), x.reshape(-1)[:8 - shift]])
    np.testing.assert_array_equal(y, want)  # data movement: exact


def test_matmul_of_a_const_x_has_the_variable_y_element_type(rt):
    """A const operand may be stored in another float type (fp32 here): the product has the
    element type of the variable operand. Small integers: every sum is exact, so bit for bit."""
    c = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    y = (np.arange(32, dtype=np.float16).reshape(4, 8) % 5) - 2
    body = [mk.const_tensor("c", c), mk.const_scalar("f", "bool", False),
            mk.op("z", "fp16", (3, 8), "matmul", transpose_x="f", transpose_y="f", x="c", y="y")]
    prog = rt.compile(mk.program([("y", "fp16", y.shape)], body, ["z"]))
    try:
        z = prog(y=y)["z"]
    finally:
        prog.close()
    assert z.dtype == np.float16
    np.testing.assert_array_equal(z, (c @ y.astype(np.float32)).astype(np.float16))
