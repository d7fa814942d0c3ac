"""Every op the sim executes, on hand-written MIL, against numpy.

fp16 programs are compared with a numpy reference that computes in fp32 (or
float64) from the fp16 inputs and rounds once to fp16 (the sim's storage rule),
under the rule of tests/tolerances.py: within ULPS fp16 ulps (one ulp of
rounding each side, libm and summation order); data movement is exact. fp32
programs are measured in fp32 ulps.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime import milkit as mk
from tolerances import assert_close

RNG = np.random.default_rng(1234)
F16 = "fp16"


def rand(shape, dtype=np.float16, lo=-2.0, hi=2.0, rng=None):
    return (rng or RNG).uniform(lo, hi, size=shape).astype(dtype)


def own_rng(seed: int) -> np.random.Generator:
    """A test's own generator: its draws do not shift the inputs of the tests after it."""
    return np.random.default_rng(seed)


def run(rt, inputs, body, outputs, blobs=None, arrays=None, runs=1):
    """inputs: {name: array}; returns {name: array} from the sim. With ``runs`` > 1 the
    program runs that many times and every run must give the same bits (the sim packs a
    narrow conv's weight at the second run since load)."""
    sig = [(n, mk.DT[a.dtype], a.shape) for n, a in inputs.items()]
    prog = rt.compile(mk.program(sig, body, outputs), blobs or {})
    try:
        outs = [prog(**inputs) for _ in range(runs)]
    finally:
        prog.close()
    for later in outs[1:]:
        for name in outputs:
            np.testing.assert_array_equal(later[name], outs[0][name])
    return outs[0]


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


ULPS = 1
"""Measured worst: 0.5 (the GEMM and batched matmul sums; most ops are bit-exact)."""


def close16(got, ref, check: str, ulps: float = ULPS):
    assert got.dtype == np.float16
    assert_close(got, f16(ref), f"sim-ops/{check}", ulps)


UNARY = {
    "exp": np.exp,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "identity": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_fp16(rt, name):
    lo = 0.01 if name == "sqrt" else -3.0
    x = rand((1, 8, 3, 5), lo=lo, hi=3.0)
    out = run(rt, {"x": x}, [mk.op("y", F16, x.shape, name, x="x")], ["y"])
    close16(out["y"], UNARY[name](x.astype(np.float32)), f"unary:{name}")


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.0, 60000.0, -60000.0], np.float16)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_fp16_nan_inf_and_signed_zero(rt, name):
    """NaN stays NaN (relu included: max(NaN, 0) is NaN, as in numpy), infinities go to
    their limits, a negative sqrt is NaN."""
    x = SPECIALS[None, :]
    if name == "silu":  # -inf * sigmoid(-inf) = -inf * 0: NaN in both, not a limit worth pinning
        x = x[:, x[0] != -np.inf]
    out = run(rt, {"x": x}, [mk.op("y", F16, x.shape, name, x="x")], ["y"])["y"]
    with np.errstate(all="ignore"):
        ref = f16(UNARY[name](x.astype(np.float32)))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    finite = ~np.isnan(ref)
    np.testing.assert_allclose(out[finite].astype(np.float32), ref[finite].astype(np.float32), rtol=1e-3, atol=0)


@pytest.mark.parametrize("name", sorted(set(UNARY) - {"identity"}))
def test_unary_fp16_equals_the_fp32_op_rounded_for_every_input(rt, name):
    """An fp16 op's result is its fp32 result rounded once, bit for bit (NaN bits included),
    for all 65536 fp16 inputs: the sim's fp16 unary ops read a table built from the fp32
    computation, and this pins the table to it."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, 1, 256, 256)
    body = [mk.op("y", F16, x.shape, name, x="x"),
            mk.const_scalar("d", "string", "fp32"), mk.op("xf", "fp32", x.shape, "cast", dtype="d", x="x"),
            mk.op("yf", "fp32", x.shape, name, x="xf"),
            mk.const_scalar("d2", "string", "fp16"), mk.op("y2", F16, x.shape, "cast", dtype="d2", x="yf")]
    out = run(rt, {"x": x}, body, ["y", "y2"])
    np.testing.assert_array_equal(out["y"].view(np.uint16), out["y2"].view(np.uint16))
    with np.errstate(all="ignore"):  # and both are the op: within the fp16 rounding of numpy's
        ref = f16(UNARY[name](x.astype(np.float64)))
    ok = np.isfinite(ref) & np.isfinite(x) & (np.abs(x.astype(np.float32)) < 10)
    close16(out["y"][ok], ref[ok].astype(np.float64), f"unary:{name}")


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "pow": np.power}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (1, 3, 1)), ((3, 1), (1, 4, 1, 5)),
                                    ((1, 4), (4,))])
def test_binary_broadcast_fp16(rt, name, shapes):
    lo = 0.5 if name == "pow" else -2.0
    x, y = rand(shapes[0], lo=lo), rand(shapes[1], lo=0.5 if name in ("real_div", "pow") else -2.0)
    oshape = np.broadcast_shapes(x.shape, y.shape)
    out = run(rt, {"x": x, "y": y}, [mk.op("z", F16, oshape, name, x="x", y="y")], ["z"])
    close16(out["z"], BINARY[name](x.astype(np.float32), y.astype(np.float32)), f"binary:{name}")


def test_binary_fp32_stays_fp32(rt):
    x, y = rand((4, 5), np.float32), rand((4, 5), np.float32)
    out = run(rt, {"x": x, "y": y}, [mk.op("z", "fp32", (4, 5), "mul", x="x", y="y")], ["z"])
    assert out["z"].dtype == np.float32
    # both round the exact product once: identical
    assert_close(out["z"], x * y, "sim-ops/binary-fp32:mul", 0, resolution="fp32")


def test_scalar_const_operand_and_inline_literal(rt):
    x = rand((1, 4, 1, 3))
    body = [mk.const_scalar("c", F16, -1.5),
            mk.op("a", F16, x.shape, "mul", x="x", y="c"),
            mk.op("b", F16, x.shape, "add", x="a", y="fp16(0x1p+0)")]
    out = run(rt, {"x": x}, body, ["b"])
    close16(out["b"], f16(x.astype(np.float32) * -1.5).astype(np.float32) + 1.0, "scalar-const")


@pytest.mark.parametrize("name", ["sub", "real_div", "pow"])
def test_scalar_x_operand_over_long_runs(rt, name):
    """A scalar as x, a tensor as y (runs of 20: the vector loop and its tail)."""
    y = rand((1, 4, 3, 20), lo=0.5, hi=2.0)
    body = [mk.const_scalar("c", F16, 1.5), mk.op("r", F16, y.shape, name, x="c", y="y")]
    out = run(rt, {"y": y}, body, ["r"])
    close16(out["r"], BINARY[name](np.float32(1.5), y.astype(np.float32)), f"binary:{name}")


def test_fp16_rounding_after_every_op(rt):
    # 1 + 2^-11 is not an fp16 value: (x + eps) - x is 0 in fp16 storage, eps in fp32
    x = np.ones((1, 1, 1, 4), np.float16)
    body = [mk.const_scalar("e", F16, 2.0 ** -12),
            mk.op("a", F16, x.shape, "add", x="x", y="e"),
            mk.op("b", F16, x.shape, "sub", x="a", y="x")]
    assert np.all(run(rt, {"x": x}, body, ["b"])["b"] == 0)
    x32 = np.ones((1, 1, 1, 4), np.float32)
    body32 = [mk.const_scalar("e", "fp32", 2.0 ** -12),
              mk.op("a", "fp32", x.shape, "add", x="x", y="e"),
              mk.op("b", "fp32", x.shape, "sub", x="a", y="x")]
    assert np.all(run(rt, {"x": x32}, body32, ["b"])["b"] == np.float32(2.0 ** -12))


def test_fp16_overflow_gives_inf(rt):
    x = np.full((1, 2, 1, 2), 300.0, np.float16)
    out = run(rt, {"x": x}, [mk.op("y", F16, x.shape, "mul", x="x", y="x")], ["y"])
    assert np.all(np.isinf(out["y"]))


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(rt, axis):
    x = rand((2, 5, 1, 7), lo=-4, hi=4)
    body = [mk.const_scalar("ax", "int32", axis), mk.op("y", F16, x.shape, "softmax", axis="ax", x="x")]
    xs = x.astype(np.float32)
    e = np.exp(xs - xs.max(axis=axis, keepdims=True))
    close16(run(rt, {"x": x}, body, ["y"])["y"], e / e.sum(axis=axis, keepdims=True), "softmax")


def test_reduce_max_propagates_nan_and_all_negative_rows(rt):
    """A NaN anywhere in a row makes its max NaN (numpy's rule), wherever it sits; a row of
    negative values has a negative max."""
    x = np.array([[np.nan, 1.0, 2.0, -1.0], [1.0, 2.0, np.nan, -1.0], [-3.0, -2.0, -5.0, -4.0],
                  [1.0, 5.0, 2.0, np.inf]], np.float16)
    body = [mk.const_ints("ax", [1]), mk.const_scalar("kd", "bool", False),
            mk.op("y", F16, (4,), "reduce_max", axes="ax", keep_dims="kd", x="x")]
    got = run(rt, {"x": x}, body, ["y"])["y"]
    np.testing.assert_array_equal(got, np.max(x, axis=1))


def test_reduce_max_over_axes_apart_propagates_nan(rt):
    """The same rule when the reduced axes have a kept one between them (the general walk)."""
    x = rand((2, 3, 2, 4), rng=own_rng(21))
    x[0, 1, 0, 2] = np.nan
    x[1, 2, 1, 3] = np.nan
    body = [mk.const_ints("ax", [1, 3]), mk.const_scalar("kd", "bool", False),
            mk.op("y", F16, (2, 2), "reduce_max", axes="ax", keep_dims="kd", x="x")]
    got = run(rt, {"x": x}, body, ["y"])["y"]
    np.testing.assert_array_equal(got, np.max(x, axis=(1, 3)))


@pytest.mark.parametrize("op,fn", [("reduce_sum", np.sum), ("reduce_mean", np.mean), ("reduce_max", np.max)])
@pytest.mark.parametrize("axes,keep", [([1], True), ([1, 3], False), ([-1], True), (None, False)])
def test_reductions(rt, op, fn, axes, keep):
    x = rand((2, 6, 3, 4))
    body = []
    args = {"x": "x"}
    if axes is not None:
        body.append(mk.const_ints("ax", axes))
        args["axes"] = "ax"
    body.append(mk.const_scalar("kd", "bool", keep))
    args["keep_dims"] = "kd"
    ref = fn(x.astype(np.float32), axis=tuple(axes) if axes is not None else None, keepdims=keep)
    body.append(mk.op("y", F16, np.shape(ref), op, **args))
    out = "y"
    if np.ndim(ref) == 0:
        # a full reduction gives a scalar, which cannot be an ANE output: reshape it to [1]
        body += [mk.const_ints("s1", [1]), mk.op("z", F16, (1,), "reshape", shape="s1", x="y")]
        out, ref = "z", np.reshape(ref, (1,))
    close16(run(rt, {"x": x}, body, [out])[out], ref, op)


def test_reshape_transpose(rt):
    x = rand((1, 12, 1, 6))
    body = [mk.const_ints("s", [1, 3, 4, -1]), mk.op("r", F16, (1, 3, 4, 6), "reshape", shape="s", x="x"),
            mk.const_ints("p", [0, 3, 1, 2]), mk.op("t", F16, (1, 6, 3, 4), "transpose", perm="p", x="r")]
    out = run(rt, {"x": x}, body, ["t"])
    np.testing.assert_array_equal(out["t"], x.reshape(1, 3, 4, 6).transpose(0, 3, 1, 2))


def test_slice_by_index_strides_masks_negative(rt):
    x = rand((2, 10, 3, 8))
    body = [mk.const_ints("b", [0, -7, 1, 7]), mk.const_ints("e", [2, 9, 3, 0]), mk.const_ints("st", [1, 2, 1, -2]),
            mk.const_bools("bm", [False, False, True, False]), mk.const_bools("em", [True, False, False, False]),
            mk.op("y", F16, (2, 3, 3, 4), "slice_by_index", begin="b", end="e", stride="st", begin_mask="bm",
                  end_mask="em", x="x")]
    out = run(rt, {"x": x}, body, ["y"])
    np.testing.assert_array_equal(out["y"], x[:, -7:9:2, :3, 7:0:-2])


def test_slice_squeeze_and_by_size(rt):
    x = rand((1, 6, 4, 5))
    body = [mk.const_ints("b", [0, 2, 1, 0]), mk.const_ints("e", [1, 5, 2, 5]),
            mk.const_bools("sq", [False, False, True, False]),
            mk.op("y", F16, (1, 3, 5), "slice_by_index", begin="b", end="e", squeeze_mask="sq", x="x"),
            mk.const_ints("b2", [0, 1, 0, 2]), mk.const_ints("sz", [1, -1, 2, 3]),
            mk.op("z", F16, (1, 5, 2, 3), "slice_by_size", begin="b2", size="sz", x="x")]
    out = run(rt, {"x": x}, body, ["y", "z"])
    np.testing.assert_array_equal(out["y"], x[:, 2:5, 1, :])
    np.testing.assert_array_equal(out["z"], x[:, 1:, 0:2, 2:5])


def test_split_sizes_and_num_splits(rt):
    x = rand((1, 10, 1, 4))
    body = [mk.const_scalar("ax", "int32", 1), mk.const_ints("sz", [3, 7]),
            "tensor<fp16, [1, 3, 1, 4]> a, tensor<fp16, [1, 7, 1, 4]> b = split(axis = ax, split_sizes = sz, x = x)"
            '[name = string("s")];',
            mk.const_scalar("ax3", "int32", 3), mk.const_scalar("n2", "int32", 2),
            "(tensor<fp16, [1, 10, 1, 2]> c, tensor<fp16, [1, 10, 1, 2]> d) = split(axis = ax3, num_splits = n2, x = x)"
            '[name = string("s2")];']
    out = run(rt, {"x": x}, body, ["a", "b", "c", "d"])
    np.testing.assert_array_equal(out["a"], x[:, :3])
    np.testing.assert_array_equal(out["b"], x[:, 3:])
    np.testing.assert_array_equal(out["c"], x[..., :2])
    np.testing.assert_array_equal(out["d"], x[..., 2:])


def test_pad_constant(rt):
    x = rand((1, 3, 2, 4))
    body = [mk.const_ints("p", [1, 0, 2, 3]), mk.const_scalar("m", "string", "constant"),
            mk.const_scalar("v", F16, 0.5),
            mk.op("y", F16, (1, 3, 3, 9), "pad", constant_val="v", mode="m", pad="p", x="x")]
    out = run(rt, {"x": x}, body, ["y"])
    np.testing.assert_array_equal(out["y"], np.pad(x, ((0, 0), (0, 0), (1, 0), (2, 3)), constant_values=0.5))


def test_split_three_unequal_parts(rt):
    x = rand((1, 2, 12, 3), rng=own_rng(13))
    body = [mk.const_scalar("ax", "int32", 2), mk.const_ints("sz", [2, 7, 3]),
            "tensor<fp16, [1, 2, 2, 3]> a, tensor<fp16, [1, 2, 7, 3]> b, tensor<fp16, [1, 2, 3, 3]> c = "
            'split(axis = ax, split_sizes = sz, x = x)[name = string("s")];']
    out = run(rt, {"x": x}, body, ["a", "b", "c"])
    for name, part in zip("abc", np.split(x, [2, 9], axis=2)):
        np.testing.assert_array_equal(out[name], part)


def test_pad_constant_fp32(rt):
    x = rand((1, 2, 3, 4), dtype=np.float32, rng=own_rng(14))
    body = [mk.const_ints("p", [0, 2, 1, 1]), mk.const_scalar("m", "string", "constant"),
            mk.const_scalar("v", "fp32", -1.25),
            mk.op("y", "fp32", (1, 2, 5, 6), "pad", constant_val="v", mode="m", pad="p", x="x")]
    out = run(rt, {"x": x}, body, ["y"])
    np.testing.assert_array_equal(out["y"], np.pad(x, ((0, 0), (0, 0), (0, 2), (1, 1)), constant_values=-1.25))


def test_cast_rounds_to_fp16_and_back(rt):
    x = np.array([[1.0, 1.0 + 2 ** -11, 65519.0, 65520.0, -1e-8, 3.14159]], np.float32)
    body = [mk.const_scalar("d", "string", "fp16"), mk.op("h", F16, x.shape, "cast", dtype="d", x="x"),
            mk.const_scalar("d2", "string", "fp32"), mk.op("y", "fp32", x.shape, "cast", dtype="d2", x="h")]
    out = run(rt, {"x": x}, body, ["y"])
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out["y"], ref)


def test_cast_to_int32_truncates(rt):
    x = np.array([[1.7, -1.7, 2.5, -0.2]], np.float32)
    body = [mk.const_scalar("d", "string", "int32"), mk.op("i", "int32", x.shape, "cast", dtype="d", x="x"),
            mk.const_scalar("d2", "string", "fp32"), mk.op("y", "fp32", x.shape, "cast", dtype="d2", x="i")]
    np.testing.assert_array_equal(run(rt, {"x": x}, body, ["y"])["y"], np.trunc(x))


def conv_ref(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    """Direct convolution in float64 (independent of the GEMM path)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    N, C, H, W = x.shape
    O, Cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    Ho = (H + pad[0] + pad[1] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    Wo = (W + pad[2] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((N, O, Ho, Wo))
    og = O // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * Cg:(g + 1) * Cg, i * dil[0]: i * dil[0] + stride[0] * (Ho - 1) + 1: stride[0],
                           j * dil[1]: j * dil[1] + stride[1] * (Wo - 1) + 1: stride[1]]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, i, j])
    return out


@pytest.mark.parametrize("cin,cout,s,n", [(16, 24, 8, 1), (70, 13, 33, 1), (768, 64, 16, 1), (40, 30, 16, 2),
                                          (16, 24, 80, 1)])
def test_conv1x1_blob_weight(rt, cin, cout, s, n):
    """Up to 64 output columns the sim packs the weight once, at the second run (the last case,
    80, packs it per call); a batch of two reuses it."""
    x = rand((n, cin, 1, s))
    w = (RNG.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float16)
    body = [mk.const_blob("w", F16, w.shape, "w.bin"),
            mk.op("y", F16, (n, cout, 1, s), "conv", weight="w", x="x")]
    out = run(rt, {"x": x}, body, ["y"], {"@model_path/weights/w.bin": mk.blobfile(w)}, runs=3)
    close16(out["y"], conv_ref(x, w), "conv1x1")


@pytest.mark.parametrize("wdt", [np.float16, np.float32])
def test_conv1x1_repeated_columns_give_the_bits_of_distinct_ones(rt, wdt):
    """A decode block repeats its padding column: the sim computes each distinct column once
    and copies it. Every column must have the bits it has among distinct columns, whichever
    way the weight is read from the second run on (fp16 slivers when the first run had few
    distinct columns; when it had many, an fp16 weight where it is, an fp32 one as fp32
    panels) and before any packing."""
    rng = own_rng(11)
    cin, cout = 300, 70
    d = rand((1, cin, 1, 16), rng=rng)
    d[0, :, 0, 7] = d[0, :, 0, 3]  # equal to column 3 but in its last element
    d[0, -1, 0, 7] += np.float16(0.5)
    idx = np.array([0, 1, 1, 1, 0, 2, 2, 5, 5, 1, 3, 7, 7, 3, 1, 0])
    rep = np.ascontiguousarray(d[..., idx])
    w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(wdt)
    wd = mk.DT[np.dtype(wdt)]
    body = [mk.const_blob("w", wd, w.shape, "w.bin"), mk.op("y", F16, (1, cout, 1, 16), "conv", weight="w", x="x")]
    src = mk.program([("x", F16, d.shape)], body, ["y"])
    blobs = {"@model_path/weights/w.bin": mk.blobfile(w)}
    outs = {}
    for first in ("rep", "distinct"):
        prog = rt.compile(src, blobs)
        try:
            seq = [first] * 3 + ["distinct" if first == "rep" else "rep"]
            outs[first] = [(which, prog(x=rep if which == "rep" else d)["y"]) for which in seq]
        finally:
            prog.close()
    base = outs["distinct"][0][1]  # distinct columns, before packing: the GEMM as it always was
    close16(base, conv_ref(d, w), "conv1x1")
    for runs in outs.values():
        for which, y in runs:
            want = base[..., idx] if which == "rep" else base
            np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("xdt", [np.float16, np.float32])
@pytest.mark.parametrize("wdt", [np.float16, np.float32])
def test_conv1x1_decode_width_gives_the_bits_of_a_wide_product(rt, xdt, wdt):
    """A decode block's product (16 distinct columns: an fp16 weight is read where it is, an
    fp32 one packed at the second run) gives, column for column, the bits of the same conv over
    80 columns (too wide to be a narrow product: the plain GEMM), before and after packing.
    Rows not a multiple of the 6-row tile, K past four blocks of 256 with a remainder, enough
    multiply-adds to be split over threads."""
    rng = own_rng(17)
    cin, cout = 1100, 125
    wide = rand((1, cin, 1, 80), dtype=xdt, rng=rng)
    x = np.ascontiguousarray(wide[..., 16:32])
    w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(wdt)
    ydt = mk.DT[np.dtype(xdt)]
    blobs = {"@model_path/weights/w.bin": mk.blobfile(w)}
    outs = {}
    for name, xs in (("x16", x), ("x80", wide)):
        body = [mk.const_blob("w", mk.DT[np.dtype(wdt)], w.shape, "w.bin"),
                mk.op("y", ydt, (1, cout, 1, xs.shape[3]), "conv", weight="w", x="x")]
        prog = rt.compile(mk.program([("x", ydt, xs.shape)], body, ["y"]), blobs)
        try:
            outs[name] = [prog(x=xs)["y"] for _ in range(3)]
        finally:
            prog.close()
    want = outs["x80"][0][..., 16:32]
    for y in outs["x16"] + [o[..., 16:32] for o in outs["x80"]]:
        np.testing.assert_array_equal(y.view(np.uint16 if xdt == np.float16 else np.uint32),
                                      want.view(np.uint16 if xdt == np.float16 else np.uint32))
    ref = conv_ref(x, w)
    if xdt == np.float16:
        close16(want, ref, "conv1x1")
    else:
        np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-5)


def test_conv1x1_weight_given_as_an_input_is_read_on_every_call(rt):
    """A narrow conv whose weight is a program input (not a BLOBFILE const) is never packed:
    each call multiplies by the weight it is given."""
    rng = own_rng(13)
    x = rand((1, 32, 1, 16), rng=rng)
    body = [mk.op("y", F16, (1, 24, 1, 16), "conv", weight="w", x="x")]
    prog = rt.compile(mk.program([("x", F16, x.shape), ("w", F16, (24, 32, 1, 1))], body, ["y"]), {})
    try:
        for _ in range(3):
            w = rand((24, 32, 1, 1), lo=-0.5, hi=0.5, rng=rng)
            close16(prog(x=x, w=w)["y"], conv_ref(x, w), "conv1x1")
    finally:
        prog.close()


@pytest.mark.parametrize("groups,kernel", [(2, 1), (1, 3), (3, 3)])
def test_narrow_grouped_and_spatial_convs_with_blob_weights(rt, groups, kernel):
    """Narrow outputs (as a decode step's) of convs that are not one GEMM over the whole
    weight: grouped, or with a spatial kernel (each group's rows, im2col columns)."""
    rng = own_rng(5)
    x = rand((1, 6, kernel + 3, 8), rng=rng)
    w = rand((12, 6 // groups, kernel, kernel), lo=-0.5, hi=0.5, rng=rng)
    ref = conv_ref(x, w, groups=groups)
    body = [mk.const_blob("w", F16, w.shape, "w.bin"), mk.const_scalar("g", "int32", groups),
            mk.op("y", F16, ref.shape, "conv", groups="g", weight="w", x="x")]
    out = run(rt, {"x": x}, body, ["y"], {"@model_path/weights/w.bin": mk.blobfile(w)}, runs=3)
    close16(out["y"], ref, "conv-narrow")


def test_conv_general_strides_pads_groups_dilations(rt):
    x = rand((2, 4, 9, 7))
    w = rand((6, 2, 3, 2), lo=-0.5, hi=0.5)
    body = [mk.const_blob("w", F16, w.shape, "w.bin"), mk.const_ints("st", [2, 1]), mk.const_ints("dl", [1, 2]),
            mk.const_ints("pd", [1, 2, 0, 1]), mk.const_scalar("pt", "string", "custom"),
            mk.const_scalar("g", "int32", 2)]
    ref = conv_ref(x, w, stride=(2, 1), pad=(1, 2, 0, 1), dil=(1, 2), groups=2)
    body.append(mk.op("y", F16, ref.shape, "conv", dilations="dl", groups="g", pad="pd", pad_type="pt",
                      strides="st", weight="w", x="x"))
    out = run(rt, {"x": x}, body, ["y"], {"@model_path/weights/w.bin": mk.blobfile(w)})
    close16(out["y"], ref, "conv-general")


@pytest.mark.parametrize("stride", [(1, 2), (2, 1), (2, 3)])
def test_conv1x1_with_strides(rt, stride):
    """A 1x1 kernel with a stride is not the pointwise case (it skips rows or columns)."""
    rng = own_rng(11)
    x = rand((1, 5, 6, 7), rng=rng)
    w = rand((3, 5, 1, 1), lo=-0.5, hi=0.5, rng=rng)
    ref = conv_ref(x, w, stride=stride)
    body = [mk.const_blob("w", F16, w.shape, "w.bin"), mk.const_ints("st", list(stride)),
            mk.op("y", F16, ref.shape, "conv", strides="st", weight="w", x="x")]
    out = run(rt, {"x": x}, body, ["y"], {"@model_path/weights/w.bin": mk.blobfile(w)})
    close16(out["y"], ref, "conv1x1-strided")


def test_conv_same_padding_fp32_weight(rt):
    x = rand((1, 3, 15, 15))
    w = rand((4, 3, 3, 3), np.float32, lo=-0.5, hi=0.5)
    body = [mk.const_blob("w", "fp32", w.shape, "w.bin"), mk.const_ints("st", [2, 2]),
            mk.const_scalar("pt", "string", "same"),
            mk.op("y", F16, (1, 4, 8, 8), "conv", pad_type="pt", strides="st", weight="w", x="x")]
    out = run(rt, {"x": x}, body, ["y"], {"@model_path/weights/w.bin": mk.blobfile(w)})
    close16(out["y"], conv_ref(x, w, stride=(2, 2), pad=(1, 1, 1, 1)), "conv-same-fp32-weight")


@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes_and_batch_broadcast(rt, tx, ty):
    M, K, N = 5, 7, 9
    x = rand((2, 1, K, M) if tx else (2, 1, M, K), lo=-1, hi=1)
    y = rand((3, N, K) if ty else (3, K, N), lo=-1, hi=1)
    body = [mk.const_scalar("tx", "bool", tx), mk.const_scalar("ty", "bool", ty)]
    xr = np.swapaxes(x, -1, -2) if tx else x
    yr = np.swapaxes(y, -1, -2) if ty else y
    ref = np.matmul(xr.astype(np.float64), yr.astype(np.float64))
    body.append(mk.op("z", F16, ref.shape, "matmul", transpose_x="tx", transpose_y="ty", x="x", y="y"))
    close16(run(rt, {"x": x, "y": y}, body, ["z"])["z"], ref, "matmul")


@pytest.mark.parametrize("ty", [False, True])
def test_matmul_vector_y_ignores_transpose_y(rt, ty):
    """A rank-1 y is a column vector whatever transpose_y says (numpy's matmul rule)."""
    rng = own_rng(12)
    x = rand((2, 3, 7), lo=-1, hi=1, rng=rng)
    y = rand((7,), lo=-1, hi=1, rng=rng)
    ref = np.matmul(x.astype(np.float64), y.astype(np.float64))
    body = [mk.const_scalar("tx", "bool", False), mk.const_scalar("ty", "bool", ty),
            mk.op("z", F16, ref.shape, "matmul", transpose_x="tx", transpose_y="ty", x="x", y="y")]
    close16(run(rt, {"x": x, "y": y}, body, ["z"])["z"], ref, "matmul")


def test_matmul_const_fp32_operand_with_fp16_x(rt):
    x = rand((1, 1, 4, 6))
    w = rand((6, 3), np.float32)
    body = [mk.const_tensor("w", w), mk.const_scalar("f", "bool", False),
            mk.op("z", F16, (1, 1, 4, 3), "matmul", transpose_x="f", transpose_y="f", x="x", y="w")]
    close16(run(rt, {"x": x}, body, ["z"])["z"], x.astype(np.float64) @ w.astype(np.float64), "matmul-fp32-const")


def test_large_gemm_two_threads_bit_identical_to_one(tmp_path):
    from anec.runtime import Runtime

    x = rand((1, 512, 1, 96))
    w = (RNG.standard_normal((384, 512, 1, 1)) / 20).astype(np.float16)
    mil = mk.program([("x", F16, x.shape)], [mk.const_blob("w", F16, w.shape, "w.bin"),
                                             mk.op("y", F16, (1, 384, 1, 96), "conv", weight="w", x="x")], ["y"])
    outs = []
    for threads in (1, 2):
        with Runtime("sim", sim_threads=threads, temp_root=tmp_path / str(threads)) as r:
            outs.append(r.compile(mil, {"@model_path/weights/w.bin": mk.blobfile(w)})(x=x)["y"])
    np.testing.assert_array_equal(outs[0], outs[1])
    close16(outs[0], conv_ref(x, w), "large-gemm")


def test_batched_matmul_split_across_threads_bit_identical_to_one(tmp_path):
    # attention-shaped: 12 batches with y broadcast over the first batch dim; two threads take
    # six batches each, one thread does all twelve; every GEMM sums over K in the same order
    from anec.runtime import Runtime

    q = rand((2, 6, 96, 64))
    k = rand((1, 6, 96, 64))
    body = [mk.const_scalar("f", "bool", False), mk.const_scalar("t", "bool", True),
            mk.op("s", F16, (2, 6, 96, 96), "matmul", transpose_x="f", transpose_y="t", x="q", y="k")]
    mil = mk.program([("k", F16, k.shape), ("q", F16, q.shape)], body, ["s"])
    outs = []
    for threads in (1, 2):
        with Runtime("sim", sim_threads=threads, temp_root=tmp_path / str(threads)) as r:
            outs.append(r.compile(mil, {})(q=q, k=k)["s"])
    np.testing.assert_array_equal(outs[0], outs[1])
    ref = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2)
    close16(outs[0], ref, "batched-matmul")


INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2 ** 31), 2 ** 31 - 1)}


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_cast_to_integer_truncates_saturates_and_maps_nan_to_zero(rt, dtype):
    """fp32 -> integer -> fp32: truncation toward zero, saturation at both ends of the
    range, NaN -> 0; bool is `x != 0` (negative values and NaN are true, as in numpy)."""
    x = np.array([[-3e9, -200.0, -128.7, -127.5, -1.5, -0.5, 0.0, np.nan, 0.7, 126.9, 127.9, 254.9, 300.0, 3e9]],
                 np.float32)
    body = [mk.const_scalar("d", "string", dtype), mk.op("i", dtype, x.shape, "cast", dtype="d", x="x"),
            mk.const_scalar("d2", "string", "fp32"), mk.op("y", "fp32", x.shape, "cast", dtype="d2", x="i")]
    got = run(rt, {"x": x}, body, ["y"])["y"]
    if dtype == "bool":
        ref = (x != 0).astype(np.float32)
    else:
        lo, hi = INT_RANGES[dtype]
        ref = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0)), lo, hi).astype(np.float32)
    np.testing.assert_array_equal(got, ref)
