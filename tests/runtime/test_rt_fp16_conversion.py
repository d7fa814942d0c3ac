"""The C runtime's fp16 <-> fp32 converter at the edges: +-inf, NaN, subnormals, +-0, 65504.

The converter has a scalar path and an F16C path (8 values at a time, when the CPU has
it; the remainder of a buffer goes through the scalar path), so every special value is
converted alone (scalar path) and inside a block of 16 (vector path). The reference is
numpy's IEEE conversion. Then the same values go through the sim: fp32 and fp16 program
inputs, a cast to fp16 inside the program, and fp16/fp32 outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.runtime import native
from anec.weight_store import WeightStore

INF = np.inf
SPECIAL_F32 = np.float32([
    INF, -INF, 0.0, -0.0, 65504.0, -65504.0, 65519.99, 65520.0, -65520.0, 1e38, -3e38,
    2.0**-24, -(2.0**-24), 2.0**-25, 1.5 * 2.0**-25, 3 * 2.0**-25, 2.0**-14, 2.0**-14 - 2.0**-24,
    1e-8, -1e-8, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 1e-40, -1e-45,  # the last two: fp32 subnormals
])
SPECIAL_F16_BITS = np.uint16([0x7C00, 0xFC00, 0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF,
                              0x83FF, 0x0400, 0x8400, 0x3C00, 0x3C01, 0x7E00, 0xFE00, 0x7C01, 0x7DFF])
"""+-inf, +-0, +-65504, +-smallest subnormal, +-largest subnormal, +-smallest normal, 1, 1 + ulp,
and NaNs (quiet, negative, signalling payloads)."""


def _f16_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).view(np.uint16)


def _same_f16(got_bits: np.ndarray, want_bits: np.ndarray) -> bool:
    """Equal bit patterns, any NaN matching any NaN."""
    nan = lambda b: ((b & 0x7C00) == 0x7C00) & ((b & 0x3FF) != 0)  # noqa: E731
    return bool(np.all((got_bits == want_bits) | (nan(got_bits) & nan(want_bits))))


@pytest.mark.parametrize("n", [1, 16], ids=["scalar", "block"])
def test_f32_to_f16_specials(n):
    for v in np.concatenate([SPECIAL_F32, np.float32([np.nan, -np.nan])]):
        x = np.full(n, v, np.float32)
        got = native.f32_to_f16(x).view(np.uint16)
        assert _same_f16(got, _f16_bits(x)), (float(v), hex(int(got[0])), hex(int(_f16_bits(x)[0])))
    # a buffer whose tail (not a multiple of 8) takes the scalar path
    x = np.resize(SPECIAL_F32, 8 * 3 + 5)
    assert _same_f16(native.f32_to_f16(x).view(np.uint16), _f16_bits(x))


@pytest.mark.parametrize("n", [1, 16], ids=["scalar", "block"])
def test_f16_to_f32_specials(n):
    for b in SPECIAL_F16_BITS:
        h = np.full(n, b, np.uint16).view(np.float16)
        got = native.f16_to_f32(h)
        want = h.astype(np.float32)
        if np.isnan(want[0]):
            assert np.isnan(got).all(), hex(int(b))
        else:
            np.testing.assert_array_equal(got, want, err_msg=hex(int(b)))
            assert np.array_equal(np.signbit(got), np.signbit(want)), hex(int(b))


def test_inf_converts_to_inf_both_ways():
    """Named for the failure it catches: +-inf must not become NaN, 65504, or 0."""
    for n in (1, 3, 8, 19):
        x = np.resize(np.float32([INF, -INF]), n)
        h = native.f32_to_f16(x)
        np.testing.assert_array_equal(h.view(np.uint16), np.resize(np.uint16([0x7C00, 0xFC00]), n))
        back = native.f16_to_f32(h)
        np.testing.assert_array_equal(back, x)


def test_every_fp16_bit_pattern_round_trips():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f = native.f16_to_f32(bits.view(np.float16))
    assert _same_f16(native.f32_to_f16(f).view(np.uint16), bits)
    finite = np.isfinite(bits.view(np.float16))
    np.testing.assert_array_equal(f[finite], bits.view(np.float16)[finite].astype(np.float32))
    np.testing.assert_array_equal(f[~finite & ~np.isnan(f)], np.float32([INF, -INF]))


CONVERT = """
func f(%x: fp32[{n}], %h: fp16[{n}]) {{
  %xh = cast(%x, dtype=fp16)
  %a = identity(%xh)
  %b = identity(%h)
  %c = cast(%b, dtype=fp32)
  return %a, %b, %c
}}
"""


def test_specials_through_the_sim(rt):
    """fp32 inputs cast to fp16 in the program, fp16 inputs passed through, fp16 and fp32
    outputs: the sim gives the interpreter's values, bit for bit, specials included."""
    n = len(SPECIAL_F32)
    h = np.resize(SPECIAL_F16_BITS, n).view(np.float16)
    x = SPECIAL_F32
    module = parse(CONVERT.format(n=n), "convert.ir")
    prog = rt.load(compile_module(module, WeightStore({})).artifacts["f"])
    try:
        got = prog(x=x, h=h)
    finally:
        prog.close()
    want = interpret(module.func(), {"x": x, "h": h}, None, "fp16")
    for k in ("a", "b"):
        assert got[k].dtype == np.float16
        assert _same_f16(got[k].view(np.uint16), want[k].view(np.uint16)), (k, got[k], want[k])
    assert got["c"].dtype == np.float32
    np.testing.assert_array_equal(got["c"], want["c"])
    assert np.array_equal(np.signbit(got["a"]), np.signbit(want["a"]))
