"""int8 activations in the IR (anec/ir/act_quant.py): the arithmetic, the scale, the checks of
an ``int8_<operand>`` annotation, and the interpreter running it."""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import AnecError
from anec.ir import act_quant as aq
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.printer import print_module

CHAIN = """\
func f(%x: fp16[1, 2, 1, 2]) {
  %w1 = const(value=[[[[1.0]], [[0.5]]], [[[-1.0]], [[0.25]]]]) : fp16[2, 2, 1, 1]
  %h = conv1x1(%x, %w1) : fp16[1, 2, 1, 2]
  %g = relu(%h) : fp16[1, 2, 1, 2]
  %w2 = const(value=[[[[0.5]], [[1.0]]], [[[1.0]], [[-0.5]]]]) : fp16[2, 2, 1, 1]
  %y = conv1x1(%g, %w2) : fp16[1, 2, 1, 2]NOTE
  return %y
}
"""
X = np.array([[[[1.0, -2.0]], [[0.5, 3.0]]]], np.float32)


def test_quantize_rounds_an_fp16_quotient_half_to_even_and_clips():
    s = float(np.float16(0.3))  # 0.300048828125
    x = np.array([-36.15625, -35.25, 0.5 * s, 1.5 * s, 2.5 * s, -0.5 * s, 100.0, -100.0, np.inf, -np.inf, np.nan],
                 np.float16)
    # -36.15625 / s = -120.5012: exactly -121, but its fp16 value is -120.5, which rounds to -120
    assert aq.quantize(x, s).tolist() == [-120, -118, 0, 2, 2, 0, 127, -128, 127, -128, 0]
    assert aq.quantize(x, s).dtype == np.int8


def test_quantize_is_coremltools_arithmetic():
    ct = pytest.importorskip("coremltools.optimize._utils")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(4096) * 20).astype(np.float16)
    for s in (0.3, 0.125, 0.0216522216796875, 3.0):
        want = ct.quantize_by_scale_and_zp(x, np.float16(s), None, "int8")
        assert np.array_equal(aq.quantize(x, s), want)
        assert np.array_equal(aq.dequantize(want, s), ct.dequantize_by_scale_and_zp(want, np.float16(s), None))


def test_the_scale_is_max_over_127_rounded_to_fp16():
    # 2.75 / 127 = 0.0216535...; fp16 has a step of 2^-16 there: 1419 * 2^-16
    assert aq.scale_for(2.75) == (1419 * 2.0 ** -16, None)
    assert aq.scale_for(127.0) == (1.0, None)
    for bad, why in ((0.0, "0 on every calibration input"), (float("inf"), "ANE-FP16-RANGE"),
                     (float("nan"), "ANE-FP16-RANGE"), (1e-9, "too small for an fp16 scale")):
        scale, reason = aq.scale_for(bad)
        assert scale is None and why in reason


def test_the_interpreter_runs_the_round_trip_in_both_modes():
    """%g = relu(W1 x) = [[1.25, 0], [0, 2.75]]; with scale s = fp16(2.75/127) it is read as
    q * s, q = round(g / s) = [[58, 0], [0, 127]] (1.25 / s = 57.73 in fp16: 57.75)."""
    s = aq.scale_for(2.75)[0]
    m = parse(CHAIN.replace("NOTE", f" @{{int8_x={s!r}}}"), "q.ir")
    plain = parse(CHAIN.replace("NOTE", ""), "p.ir")
    gq = np.array([[58, 0], [0, 127]], np.float32) * np.float32(s)
    w2 = np.array([[0.5, 1.0], [1.0, -0.5]], np.float32)
    want = (w2 @ gq.astype(np.float16).astype(np.float32)).astype(np.float16)
    for mode in ("fp16", "fp32"):
        got = interpret(m.funcs["f"], {"x": X}, None, mode=mode)["y"]
        assert np.array_equal(np.asarray(got, np.float16)[0, :, 0, :], want), mode
    ref = interpret(plain.funcs["f"], {"x": X}, None, mode="fp16")["y"]
    assert not np.array_equal(ref, interpret(m.funcs["f"], {"x": X}, None, mode="fp16")["y"])


def test_the_annotation_prints_and_parses_back():
    s = aq.scale_for(2.75)[0]
    m = parse(CHAIN.replace("NOTE", f" @{{int8_x={s!r}}}"), "q.ir")
    again = parse(print_module(m), "again.ir")
    (node,) = [n for n in again.funcs["f"].nodes if n.result.name == "y"]
    assert aq.quantized_operands(node) == {0: s}


@pytest.mark.parametrize("note,needle", [
    ("int8_x=0.0", "not a positive finite fp16 value"),
    ("int8_x=-0.5", "not a positive finite fp16 value"),
    ("int8_x=nan", "not a positive finite fp16 value"),
    ("int8_x=0.1", "not a positive finite fp16 value"),  # 0.1 is not an fp16 value
    ("int8_x=true", "not a positive finite fp16 value"),
    ('int8_x="0.5"', "not a positive finite fp16 value"),
    ("int8_b=0.5", "conv1x1 has no operand 'b'"),
])
def test_a_hostile_annotation_is_a_located_error(note, needle):
    m = parse(CHAIN.replace("NOTE", f" @{{{note}}}"), "bad.ir")
    with pytest.raises(AnecError, match=needle) as e:
        interpret(m.funcs["f"], {"x": X}, None, mode="fp16")
    assert e.value.span is not None and e.value.span.line == 6


def test_an_annotation_on_another_op_is_refused():
    m = parse(CHAIN.replace("NOTE", "").replace("%g = relu(%h) : fp16[1, 2, 1, 2]",
                                                 "%g = relu(%h) : fp16[1, 2, 1, 2] @{int8_x=0.5}"), "bad.ir")
    with pytest.raises(AnecError, match="annotation 'int8_x' on a relu"):
        interpret(m.funcs["f"], {"x": X}, None, mode="fp16")


def test_other_annotations_do_not_quantize():
    m = parse(CHAIN.replace("NOTE", " @{in_bytes=8, spill=false}"), "sram.ir")
    node = m.funcs["f"].nodes[-1]
    assert not aq.has_quantized(node) and aq.quantized_operands(node) == {}
