"""Float literals: the shortest decimals that every MIL reader maps back to the exact value.

The emitter writes each fp16/fp32 literal as a ``%g``-style decimal (the on-device
references never write hex floats). These tests check, independently of the
emitter's own code, that the decimal reads back bit-exactly along every parse path
a reader may take (decimal -> dtype, decimal -> fp64 -> dtype, decimal -> fp32 ->
fp16), for every finite fp16 value and for fp32 values from hypothesis, and that
the C simulator's parser (strtod) and the test-side MIL parser read them exactly.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from anec.ir.types import DType
from anec.mil.emitter import DIALECTS
from anec.mil.float_literals import float_literal
from anec.runtime import Runtime, backend_available

from .milcheck import parse_mil

DECIMAL = re.compile(r"-?(0|[1-9]\d*)(\.\d*[1-9])?(e[+-]\d{2,3})?\Z")
"""``%g`` output: no hex, no leading ``+``, no trailing zeros, a two-or-more-digit exponent."""

FINITE_FP16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
FINITE_FP16 = FINITE_FP16[np.isfinite(FINITE_FP16)]


def _bits(v) -> int:
    v = np.asarray(v)
    return int(v.view({2: np.uint16, 4: np.uint32}[v.dtype.itemsize]))


def _round_exact(q: Fraction, negative: bool, np_type) -> np.floating:
    """The exact rational ``q`` rounded to ``np_type`` (nearest, ties to even), by bracketing
    it between adjacent representable values (written independently of the emitter)."""
    big = np_type(np.finfo(np_type).max)
    a = abs(q)
    if a == 0:
        return np_type(-0.0 if negative else 0.0)
    lo = np_type(float(a))  # within one ulp of a: bracket it exactly
    while Fraction(float(lo)) > a:
        lo = np.nextafter(lo, np_type(0))
    while lo < big and Fraction(float(np.nextafter(lo, np_type(np.inf)))) <= a:
        lo = np.nextafter(lo, np_type(np.inf))
    if Fraction(float(lo)) == a:
        r = lo
    else:
        hi = np.nextafter(lo, np_type(np.inf))
        if lo == big:  # above the largest finite: the next value would be 2^(emax+1)
            hi_exact = Fraction(2) ** (np.finfo(np_type).maxexp)
        else:
            hi_exact = Fraction(float(hi))
        mid = (Fraction(float(lo)) + hi_exact) / 2
        lo_even = _bits(lo) % 2 == 0
        r = lo if a < mid or (a == mid and lo_even) else (hi if lo != big else np_type(np.inf))
    return -r if negative else r


def _all_paths(text: str, np_type) -> list:
    """``text`` read as ``np_type``: directly, through fp64, and (fp16) through fp32."""
    q, neg = Fraction(text), text.startswith("-")
    f64 = float(text)
    with np.errstate(over="ignore"):
        paths = [_round_exact(q, neg, np_type), np_type(f64)]
        if np_type is np.float16:
            paths += [np.float16(_round_exact(q, neg, np.float32)), np.float16(np.float32(f64))]
    return paths


def _digits(text: str) -> int:
    """Significant digits of a decimal (``"65500"`` -> 3, ``"0.001302"`` -> 4)."""
    mant = text.lstrip("-").split("e")[0].replace(".", "").strip("0")
    return max(1, len(mant))


def test_every_finite_fp16_value_reads_back_exactly_on_every_path():
    """Exhaustive: all 63,488 finite fp16 values (incl. -0, subnormals, +-65504)."""
    assert FINITE_FP16.size == 63488
    for v in FINITE_FP16:
        text = float_literal(float(v), DType.fp16)
        assert DECIMAL.match(text) or text == "-0.0", text
        for p in _all_paths(text, np.float16):
            assert _bits(p) == _bits(v), (float(v), text, float(p))
        # shortest: as few significant digits as the shortest fp16 round trip (numpy's Dragon4)
        assert _digits(text) == _digits(np.format_float_scientific(v, unique=True, trim="-")), text


FP32_EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 1 / 3, 65504.0, 2.0**24, 2.0**24 + 2, 16777217.0 - 1,
              float(np.finfo(np.float32).tiny), -float(np.finfo(np.float32).tiny),
              float(np.finfo(np.float32).smallest_subnormal), -float(np.finfo(np.float32).smallest_subnormal),
              float(np.nextafter(np.float32(np.finfo(np.float32).tiny), np.float32(0))),
              float(np.finfo(np.float32).max), -float(np.finfo(np.float32).max), 1e-5, 3.14159265]


@settings(max_examples=1500, deadline=None)
@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
@example(float(np.finfo(np.float32).max))
@example(-float(np.finfo(np.float32).max))
@example(float(np.finfo(np.float32).tiny))
@example(float(np.finfo(np.float32).smallest_subnormal))
@example(-0.0)
def test_fp32_values_read_back_exactly_on_every_path(v):
    text = float_literal(v, DType.fp32)
    assert DECIMAL.match(text) or text == "-0.0", text
    assert _digits(text) <= 9  # 9 significant digits always suffice for fp32
    want = np.float32(v)
    for p in _all_paths(text, np.float32):
        assert _bits(p) == _bits(want), (v, text, float(p))


def test_fp32_edge_values():
    for v in FP32_EDGES:
        v = float(np.float32(v))
        text = float_literal(v, DType.fp32)
        for p in _all_paths(text, np.float32):
            assert _bits(p) == _bits(np.float32(v)), (v, text)


def test_words_for_non_finite_values():
    for dt in (DType.fp16, DType.fp32):
        assert float_literal(math.inf, dt) == "inf"
        assert float_literal(-math.inf, dt) == "-inf"
        assert float_literal(math.nan, dt) == "nan"


def _program(dtype: str, literals: list[str]) -> str:
    """A MIL program returning a const tensor of ``literals`` (identity keeps the bits)."""
    d = DIALECTS["ios18"]
    t = f"tensor<{dtype}, [1, 1, 1, {len(literals)}]>"
    return (f"program({d.program_version})\n{d.build_info}\n{{\n"
            f"    func main<ios18>({t} x) {{\n"
            f"        {t} c = const()[name = string(\"c\"), val = {t}([{', '.join(literals)}])];\n"
            f"        {t} y = identity(x = c)[name = string(\"y\")];\n"
            f"    }} -> (y);\n}}\n")


def _sim_roundtrip(dtype: str, values: np.ndarray) -> np.ndarray:
    ok, why = backend_available("sim")
    if not ok:
        pytest.skip(why)
    dt = DType(dtype)
    text = _program(dtype, [float_literal(float(v), dt) for v in values])
    with Runtime("sim") as rt:
        prog = rt.compile(text)
        return prog(x=np.zeros((1, 1, 1, values.size), values.dtype))["y"].reshape(-1)


def test_c_sim_reads_every_fp16_literal_bit_exactly():
    """The sim's MIL parser (strtod, then fp64 -> fp32 -> fp16) on all finite fp16 values."""
    got = _sim_roundtrip("fp16", FINITE_FP16)
    np.testing.assert_array_equal(got.view(np.uint16), FINITE_FP16.view(np.uint16))


def test_c_sim_reads_fp32_literals_bit_exactly():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    subnormal = rng.integers(1, 1 << 23, 2000, dtype=np.uint64).astype(np.uint32)  # exponent field 0
    values = np.concatenate([np.asarray(FP32_EDGES, np.float32), bits.view(np.float32),
                             subnormal.view(np.float32), -subnormal.view(np.float32)])
    values = values[np.isfinite(values)]
    got = _sim_roundtrip("fp32", values)
    np.testing.assert_array_equal(got.view(np.uint32), values.view(np.uint32))


def test_c_sim_reads_non_finite_words():
    got = _sim_roundtrip("fp16", np.array([np.inf, -np.inf, np.nan], np.float16))
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


def test_test_side_mil_parser_reads_literals_exactly():
    """tests/mil/milcheck.py (which feeds coremltools) reads the decimals back exactly too.

    coremltools itself has no MIL text parser; the type check rebuilds programs from
    the values this parser returns.
    """
    sample = FINITE_FP16[::7]
    mil = parse_mil(_program("fp16", [float_literal(float(v), DType.fp16) for v in sample]))
    values = mil.stmts[0].val.value
    got = np.array([np.float16(v) for v in values])
    np.testing.assert_array_equal(got.view(np.uint16), sample.view(np.uint16))
    words = parse_mil(_program("fp16", ["inf", "-inf", "nan"])).stmts[0].val.value
    assert words[0] == math.inf and words[1] == -math.inf and math.isnan(words[2])
