"""The interpreter's fp16 mode, op by op, and its fp16 <-> fp32 conversions at the edges.

fp16 mode stores every fp16 value rounded, after the op that produces it. Rounding only
the outputs would leave every single-op test and most differentials passing (one op
rounds once either way), so each test here puts a ``cast(.., dtype=fp32)`` after the op
under test: the cast reads the stored intermediate, and an unrounded one shows.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.ir.interp import interpret
from anec.ir.ops import OPS
from anec.ir.parser import parse

INF = np.inf


def run(text: str, feeds: dict, mode: str = "fp16") -> dict:
    return interpret(parse(text, "fp16.ir").func(), feeds, None, mode)


def representable(a: np.ndarray) -> bool:
    """Every element of the fp32 array is an fp16 value (NaN and inf included)."""
    with np.errstate(over="ignore"):
        back = a.astype(np.float16).astype(np.float32)
    return bool(np.all((back == a) | (np.isnan(back) & np.isnan(a))))


def test_fp16_mode_rounds_every_intermediate_value():
    """(x + 1024) - 1024 in fp16 storage is x rounded to the spacing around 1024 (0.5 below,
    1 above, ties to even): the intermediate sum must be stored rounded, not carried in fp32."""
    text = """
func f(%x: fp16[6]) {
  %big = const(value=1024.0) : fp16[]
  %a = add(%x, %big)
  %y = sub(%a, %big)
  %y32 = cast(%a, dtype=fp32)
  return %y, %y32
}"""
    x = np.float16([0.3, 0.7, -0.2, 1.4, 2.5, -0.75])
    out = run(text, {"x": x})
    np.testing.assert_array_equal(out["y32"], np.float32([1024.0, 1025.0, 1024.0, 1025.0, 1026.0, 1023.0]))
    np.testing.assert_array_equal(out["y"], np.float16([0.0, 1.0, 0.0, 1.0, 2.0, -1.0]))
    # the fp32 mode, by design, does not round intermediates: x comes back (to fp16 precision)
    np.testing.assert_allclose(run(text, {"x": x}, "fp32")["y"], x.astype(np.float32), atol=1e-4)


# One program per op whose result, computed in fp32 from fp16 operands, is generally not an
# fp16 value; the cast after it reads the stored result. Ops that only move or select fp16
# values (and const, cast, whose rounding is their meaning) are listed as exact.
ROUNDING = {
    "neg": None, "identity": None, "relu": None, "reduce_max": None, "reshape": None,
    "transpose": None, "slice": None, "split": None, "pad": None, "concat": None,
    "const": None, "cast": None,
    "exp": "%r = exp(%x)",
    "sqrt": "%a = relu(%x)\n  %r = sqrt(%a)",
    "rsqrt": "%a = relu(%x)\n  %r = rsqrt(%a)",
    "tanh": "%r = tanh(%x)",
    "sigmoid": "%r = sigmoid(%x)",
    "gelu": "%r = gelu(%x)",
    "conv1x1": ("%xr = reshape(%x, shape=[1, 2, 1, 4])\n"
                "  %w = const(value=[[[[0.3]], [[0.7]]], [[[1.1]], [[-0.9]]]]) : fp16[2, 2, 1, 1]\n"
                "  %r = conv1x1(%xr, %w)"),
    "matmul": "%xr = reshape(%x, shape=[2, 4])\n  %r = matmul(%xr, %xr, transpose_y=true)",
    "add": "%c = const(value=0.1) : fp16[]\n  %r = add(%x, %c)",
    "sub": "%c = const(value=0.1) : fp16[]\n  %r = sub(%x, %c)",
    "mul": "%r = mul(%x, %x)",
    "pow": "%c = const(value=1.7) : fp16[]\n  %a = mul(%x, %x)\n  %r = pow(%a, %c)",
    "softmax": "%r = softmax(%x)",
    "reduce_sum": "%xr = reshape(%x, shape=[2, 4])\n  %r = reduce_sum(%xr, axes=[1])",
    "reduce_mean": "%xr = reshape(%x, shape=[2, 4])\n  %r = reduce_mean(%xr, axes=[1])",
}


def test_every_op_is_classified():
    assert sorted(ROUNDING) == sorted(OPS)


@pytest.mark.parametrize("op", sorted(k for k, v in ROUNDING.items() if v))
def test_fp16_mode_stores_each_op_result_rounded(op):
    """fp16 mode: the op's fp16 result, read by a cast to fp32, is an fp16 value; fp32 mode
    (no intermediate rounding) gives values that are not, so the check has teeth."""
    body = ROUNDING[op]
    text = f"func f(%x: fp16[8]) {{\n  {body}\n  %y = cast(%r, dtype=fp32)\n  return %y\n}}"
    x = np.float16([0.31, -1.7, 2.9, 0.013, -0.55, 1.23, 3.3, -2.1])
    y16 = run(text, {"x": x})["y"]
    y32 = run(text, {"x": x}, "fp32")["y"]
    assert y16.dtype == np.float32 and representable(y16), y16
    assert not representable(y32), f"{op}: the fp32-mode result is an fp16 value; pick other inputs"
    np.testing.assert_allclose(y16, y32, rtol=2.0**-8, atol=2.0**-20)  # the same computation


# ---- fp16 <-> fp32 conversion at the edges, in the interpreter ------------------------------

F32_TO_F16 = [
    # fp32 input -> the fp16 value (IEEE round to nearest even; overflow to inf)
    (INF, INF), (-INF, -INF), (65504.0, 65504.0), (65519.99, 65504.0), (65520.0, INF),
    (-65520.0, -INF), (1e38, INF), (0.0, 0.0), (-0.0, -0.0),
    (2.0**-24, 2.0**-24), (2.0**-25, 0.0), (1.5 * 2.0**-25, 2.0**-24), (3 * 2.0**-25, 2 * 2.0**-24),
    (-(2.0**-24), -(2.0**-24)), (2.0**-14, 2.0**-14), (2.0**-14 - 2.0**-24, 2.0**-14 - 2.0**-24),
    (1e-8, 0.0), (-1e-8, -0.0), (1.0 + 2.0**-11, 1.0), (1.0 + 3 * 2.0**-11, 1.0 + 2 * 2.0**-10),
]


def test_casts_to_fp16_round_overflow_and_keep_subnormals():
    text = "func f(%x: fp32[{n}]) {{\n  %h = cast(%x, dtype=fp16)\n  %y = cast(%h, dtype=fp32)\n  return %h, %y\n}}"
    x = np.float32([a for a, _ in F32_TO_F16])
    want = np.float32([b for _, b in F32_TO_F16])
    for mode in ("fp16", "fp32"):  # a cast rounds in both modes: it is the program's meaning
        out = run(text.format(n=len(x)), {"x": x}, mode)
        np.testing.assert_array_equal(out["y"], want)
        assert np.array_equal(np.signbit(out["y"]), np.signbit(want))  # -0 stays -0
        np.testing.assert_array_equal(out["h"].astype(np.float32), want)


def test_nan_converts_to_nan_both_ways():
    text = "func f(%x: fp32[2]) {\n  %h = cast(%x, dtype=fp16)\n  %y = cast(%h, dtype=fp32)\n  return %y\n}"
    y = run(text, {"x": np.float32([np.nan, -np.nan])})["y"]
    assert np.all(np.isnan(y))


def test_every_fp16_value_converts_to_fp32_exactly():
    """All 65536 bit patterns, +-inf, NaNs and subnormals included, as fp16 inputs of a cast."""
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16)
    text = "func f(%x: fp16[65536]) {\n  %y = cast(%x, dtype=fp32)\n  return %y\n}"
    y = run(text, {"x": h})["y"]
    finite = np.isfinite(h)
    np.testing.assert_array_equal(y[finite], h[finite].astype(np.float32))
    np.testing.assert_array_equal(y[h == INF], np.float32([INF]))
    np.testing.assert_array_equal(y[h == -INF], np.float32([-INF]))
    assert np.isnan(y[np.isnan(h)]).all() and np.isnan(h).sum() == 2046
    # subnormal fp16 values are m * 2**-24 exactly
    sub = (bits & 0x7C00) == 0
    m = (bits[sub] & 0x3FF).astype(np.float64) * np.where(bits[sub] & 0x8000, -1.0, 1.0)
    np.testing.assert_array_equal(y[sub].astype(np.float64), m * 2.0**-24)


def test_declared_fp16_inputs_round_like_a_cast():
    """An fp32 array given for an fp16 input is rounded (the host's conversion), both modes."""
    text = "func f(%x: fp16[{n}]) {{\n  %y = cast(%x, dtype=fp32)\n  return %y\n}}"
    x = np.float32([a for a, _ in F32_TO_F16])
    for mode in ("fp16", "fp32"):
        y = run(text.format(n=len(x)), {"x": x}, mode)["y"]
        np.testing.assert_array_equal(y, np.float32([b for _, b in F32_TO_F16]))


def test_fp16_mode_overflow_is_inf_and_propagates():
    """An op result beyond 65504 is stored as inf; inf - inf is NaN downstream."""
    text = ("func f(%x: fp16[3]) {\n  %a = mul(%x, %x)\n  %b = sub(%a, %a)\n  %y = cast(%a, dtype=fp32)\n"
            "  %z = cast(%b, dtype=fp32)\n  return %y, %z\n}")
    out = run(text, {"x": np.float16([300.0, -256.0, 255.0])})
    np.testing.assert_array_equal(out["y"], np.float32([INF, INF, 65024.0]))
    assert np.isnan(out["z"][:2]).all() and out["z"][2] == 0.0
    # fp32 mode keeps 90000 (an fp32 value) where the program says fp16: no rounding, no inf
    assert run(text, {"x": np.float16([300.0, -256.0, 255.0])}, "fp32")["y"][0] == 90000.0


def test_pow_of_negative_infinity_follows_c():
    """(-inf) ** y as C's pow (and the sim's powf): +inf for y = 0.5, -inf for 3, +0 for -0.5."""
    import math

    from anec.ir.interp import interpret
    from anec.ir.parser import parse

    g = parse("func f(%x: fp32[3], %y: fp32[3]) {\n  %z = pow(%x, %y)\n  return %z\n}\n", "p.ir").funcs["f"]
    x = np.full(3, -np.inf, np.float32)
    y = np.array([0.5, 3.0, -0.5], np.float32)
    got = interpret(g, {"x": x, "y": y}, mode="fp32")["z"]
    want = [math.pow(-math.inf, float(e)) for e in y]
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert math.copysign(1.0, float(got[2])) == 1.0
