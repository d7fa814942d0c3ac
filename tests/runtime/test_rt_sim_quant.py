"""The sim's quantize and dequantize (csrc/sim_quant.c) on hand-written MIL.

The values are checked against numpy written here from coremltools' definition of the two
ops (``optimize/_utils.py``: the quotient in the input's dtype, ``np.around`` half to even,
clip to the output range; dequantize multiplies in fp32 and casts to the scale's dtype), and
against coremltools' own function when it is installed. Then every malformed op a hostile
MIL could hold is refused with its message and line, and the program just inside each check
compiles.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from tests.runtime import milkit as mk

SHAPE = (1, 2, 1, 8)
X = [("x", "fp16", SHAPE)]
SCALE = float(np.float16(0.3))  # 0.300048828125: quotients land between fp16 values


def qdq(scale: float = SCALE, dtype: str = "int8", zero: int | None = None, scale_dtype: str = "fp16",
        qdecl: str | None = None, extra: dict | None = None) -> list[str]:
    """x -> quantize -> q -> dequantize -> y, and qf: q cast to fp16 (outputs are fp16 or fp32)."""
    body = [mk.const_scalar("od", "string", dtype), mk.const_scalar("s", scale_dtype, scale)]
    qargs = {"input": "x", "output_dtype": "od", "scale": "s", **(extra or {})}
    dqargs = {"input": "q", "scale": "s"}
    if zero is not None:
        body.append(mk.const_scalar("zp", dtype, zero))
        qargs["zero_point"] = dqargs["zero_point"] = "zp"
    body.append(mk.op("q", qdecl or dtype, SHAPE, "quantize", **qargs))
    body.append(mk.op("y", "fp16", SHAPE, "dequantize", **dqargs))
    body += [mk.const_scalar("f16", "string", "fp16"), mk.op("qf", "fp16", SHAPE, "cast", x="q", dtype="f16")]
    return body


def reference(x: np.ndarray, scale: float, lo: int = -128, hi: int = 127, zero: int = 0) -> np.ndarray:
    """coremltools' quantize_by_scale_and_zp for an fp16 input: fp16 quotient, half to even, clip."""
    with np.errstate(all="ignore"):
        t = np.around(x.astype(np.float16) / np.float16(scale)).astype(np.float32) + zero
    t[np.isnan(t)] = zero
    return np.clip(t, lo, hi)


def run(rt, body, x, outputs=("qf", "y")):
    prog = rt.compile(mk.program(X, body, list(outputs)))
    try:
        return prog(x=x)
    finally:
        prog.close()


# fp16 inputs whose quotient by SCALE rounds one way exactly and the other way once it is an
# fp16 value (-36.15625 / s = -120.5012 -> -121, but fp16(-120.5012) = -120.5 -> -120), ties,
# values past the range, infinities and NaN
X_CASES = np.array([-36.15625, -35.25, 0.0, 0.14990234375, 0.449951171875, -0.14990234375, 100.0, -100.0, 1.0,
                    -1.0, 2.5, 37.5, np.inf, -np.inf, np.nan, 6e-8], np.float16).reshape(SHAPE)


def test_the_fp16_quotient_decides_the_rounding():
    """The cases above tell the fp16 quotient from the exact one (the test's claim has teeth)."""
    exact = np.around(X_CASES.astype(np.float64).ravel()[:2] / SCALE)
    assert exact.tolist() == [-121.0, -117.0]
    assert reference(X_CASES, SCALE).ravel()[:2].tolist() == [-120.0, -118.0]


def test_quantize_and_dequantize_compute_coremltools_values(rt):
    got = run(rt, qdq(), X_CASES)
    want = reference(X_CASES, SCALE)
    assert np.array_equal(got["qf"].astype(np.float32), want)
    assert np.array_equal(got["y"], (want * np.float32(SCALE)).astype(np.float16))
    try:
        from coremltools.optimize._utils import quantize_by_scale_and_zp
    except ImportError:
        return
    finite = np.isfinite(X_CASES.ravel())  # coremltools leaves NaN to numpy's cast (undefined)
    ct = quantize_by_scale_and_zp(X_CASES.ravel()[finite], np.float16(SCALE), None, "int8")
    assert np.array_equal(ct.astype(np.float32), got["qf"].ravel()[finite].astype(np.float32))


def test_uint8_with_a_zero_point(rt):
    x = np.linspace(-50, 50, 16).astype(np.float16).reshape(SHAPE)
    got = run(rt, qdq(scale=0.25, dtype="uint8", zero=128), x)
    want = reference(x, 0.25, 0, 255, 128)
    assert np.array_equal(got["qf"].astype(np.float32), want)
    assert np.array_equal(got["y"], ((want - 128) * np.float32(0.25)).astype(np.float16))


def test_a_hex_float_scale_as_maderix_writes_it(rt):
    """maderix's ane_int8_bench.m writes the scales as fp16(0x1p-3)."""
    body = [line.replace(mk.hexf(0.125), "0x1p-3") for line in qdq(scale=0.125)]
    assert any("fp16(0x1p-3)" in line for line in body)
    x = np.arange(16, dtype=np.float16).reshape(SHAPE) - 8
    assert np.array_equal(run(rt, body, x)["y"], x)  # multiples of 0.125 survive exactly


def _replace(body: list[str], old: str, new: str) -> list[str]:
    out = [line.replace(old, new) for line in body]
    assert out != body, old
    return out


def _cases() -> dict[str, tuple[list[str], str, str]]:
    """name -> (body, message, the result whose line is named)."""
    c: dict[str, tuple[list[str], str, str]] = {}
    for name, value, msg in (("zero", 0.0, "scale 0 must be positive"),
                             ("negative", -0.5, "scale -0.5 must be positive"),
                             ("infinite", float("inf"), "scale inf must be positive and finite"),
                             ("NaN", float("nan"), "scale nan must be positive")):
        c[f"quantize scale {name}"] = (qdq(scale=value), msg, "q")
    c["scale of another dtype than the input"] = (qdq(scale_dtype="fp32"), "'scale' is fp32, it must be fp16", "q")
    c["output_dtype not int8 or uint8"] = (qdq(dtype="int16", qdecl="int8"), 'output_dtype "int16"', "q")
    c["declared result of another dtype"] = (qdq(qdecl="fp16"), "'q' is declared tensor<fp16, [1, 2, 1, 8]> but the "
                                                                "op produces tensor<int8, [1, 2, 1, 8]>", "q")
    c["declared result of another shape"] = (
        _replace(qdq(), "tensor<int8, [1, 2, 1, 8]> q", "tensor<int8, [1, 2, 8]> q"), "but the op produces", "q")
    c["an axis with a scalar scale"] = (qdq(extra={"axis": "s"}), "axis is only for per-channel", "q")
    vector = [mk.const_scalar("od", "string", "int8"), mk.const_tensor("s", np.full(2, 0.5, np.float16)),
              mk.op("q", "int8", SHAPE, "quantize", input="x", output_dtype="od", scale="s"),
              mk.op("y", "fp16", SHAPE, "dequantize", input="q", scale="s")]
    c["a per-channel scale vector"] = (vector, "must be a scalar (a per-tensor scale)", "q")
    runtime = [mk.const_scalar("od", "string", "int8"),
               mk.op("r", "fp16", SHAPE, "relu", x="x"),
               mk.op("q", "int8", SHAPE, "quantize", input="x", output_dtype="od", scale="r"),
               mk.op("y", "fp16", SHAPE, "dequantize", input="q", scale="r")]
    c["a scale computed at run time"] = (runtime, "'scale' must be a const, but 'r' is computed at run time", "q")
    c["a zero point of another dtype"] = (
        _replace(qdq(zero=0), 'int8 zp = const()[name = string("zp"), val = int8(0)]',
                 'uint8 zp = const()[name = string("zp"), val = uint8(0)]'), "zero_point is uint8, it must be int8", "q")
    c["dequantize of an fp16 tensor"] = (
        _replace(qdq(), "dequantize(input = q", "dequantize(input = x"), "'input' must be int8 or uint8", "y")
    c["quantize of an int8 tensor"] = (
        qdq() + [mk.op("z", "int8", SHAPE, "quantize", input="q", output_dtype="od", scale="s")],
        "'input' must be fp16 or fp32", "z")
    c["an unknown argument"] = (qdq(extra={"rounding": "s"}), "rounding", "q")
    c["no output_dtype"] = (_replace(qdq(), "output_dtype = od, ", ""), "missing required argument 'output_dtype'",
                            "q")
    return c


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_malformed_quantization_is_refused(rt, name):
    body, needle, at = CASES[name]
    mil = mk.program(X, body, ["y"])
    line = next(i for i, text in enumerate(mil.splitlines(), 1) if f" {at} = " in text)
    with pytest.raises(RuntimeFailure) as e:
        rt.compile(mil)
    msg = str(e.value)
    assert needle in msg, msg
    assert f"model.mil:{line}:" in msg, (line, msg)


def test_an_ios16_program_has_no_quantize(rt):
    mil = mk.program(X, qdq(), ["y"]).replace("main<ios18>", "main<ios16>")
    with pytest.raises(RuntimeFailure, match="quantize is an iOS17 op; func main<ios16> does not have it"):
        rt.compile(mil)
    rt.compile(mil.replace("main<ios16>", "main<ios17>")).close()


@pytest.mark.parametrize("scale", [2.0 ** -24, 65504.0])
def test_the_smallest_and_largest_fp16_scales_compile(rt, scale):
    """Just inside the scale check: any positive finite fp16 value (a subnormal too)."""
    x = np.full(SHAPE, 1.0, np.float16)
    got = run(rt, qdq(scale=scale), x)
    assert np.array_equal(got["qf"].astype(np.float32), reference(x, scale))


def test_the_fuzz_corpus_seed_computes_the_values_worked_out_by_hand(rt):
    """tests/c/corpus/mil/quantize.mil (the MIL fuzzer's seed for these ops): maderix's scale
    0x1p-3, int8 and uint8 with zero point 128. x / 0.125: 0.5 and -0.5 are ties (to 0), 1.5
    goes to 2, 160 and -160 clip (int8 to 127 / -128; uint8 288 to 255 and -32 to 0), 8 stays,
    fp16(0.3) / 0.125 = 2.4 goes to 2, fp16(3.14) = 3.140625 / 0.125 = 25.125 to 25."""
    from pathlib import Path

    mil = (Path(__file__).resolve().parents[1] / "c" / "corpus" / "mil" / "quantize.mil").read_text()
    x = np.array([0.0625, 0.1875, -0.0625, 20, -20, 1.0, 0.3, 3.14], np.float16).reshape(1, 4, 1, 2)
    prog = rt.compile(mil, limits=mk.limits())
    try:
        got = prog(x=x)
    finally:
        prog.close()
    assert got["y"].ravel().tolist() == [0, 0.25, 0, 15.875, -16, 1.0, 0.25, 3.125]
    assert got["z"].ravel().tolist() == [0, 0.25, 0, 15.875, -16, 1.0, 0.25, 3.125]
