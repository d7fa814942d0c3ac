"""quantize-activations: which activations are candidates, the calibrated scales, the gate.

The docstring's Before/After runs in test_pass_docstrings; here: the scales against a hand
computation over several samples, what stays fp16 and why, the gate dropping an
outlier-heavy activation (and only it), and the errors a calibration set can cause.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import with_activation_quant
from anec.compress.activations import ActivationSpec
from anec.diagnostics import AnecError
from anec.ir.act_quant import quantized_operands, scale_for
from anec.ir.parser import parse
from anec.passes import PassContext, QuantizeActivations, run_pipeline
from anec.passes.pipelines import DEFAULT
from anec.weight_store import WeightStore

CHAIN = """\
func f(%x: fp16[1, 2, 1, 2]) {
  %w1 = const(value=[[[[1.0]], [[0.5]]], [[[-1.0]], [[0.25]]]]) : fp16[2, 2, 1, 1]
  %h = conv1x1(%x, %w1) : fp16[1, 2, 1, 2]
  %g = relu(%h) : fp16[1, 2, 1, 2]
  %w2 = const(value=[[[[0.5]], [[1.0]]], [[[1.0]], [[-0.5]]]]) : fp16[2, 2, 1, 1]
  %y = conv1x1(%g, %w2) : fp16[1, 2, 1, 2]
  %m = matmul(%g, %y, transpose_y=true) : fp16[1, 2, 1, 1]
  return %y, %m
}
"""

TWO = """\
func f(%x1: fp16[1, 8, 1, 16], %x2: fp16[1, 8, 1, 16]) {
  %wa = const(weight="wa") : fp16[8, 8, 1, 1]
  %wb = const(weight="wb") : fp16[8, 8, 1, 1]
  %a = relu(%x1) : fp16[1, 8, 1, 16]
  %ya = conv1x1(%a, %wa) : fp16[1, 8, 1, 16]
  %b = relu(%x2) : fp16[1, 8, 1, 16]
  %yb = conv1x1(%b, %wb) : fp16[1, 8, 1, 16]
  return %ya, %yb
}
"""
"""Two independent activations %a and %b, each read by a conv over a weight."""


def _run(text: str, calibration: dict, weights=None, **kw):
    m = parse(text, "t.ir")
    ctx = PassContext.default(weights=weights)
    run_pipeline(m, (QuantizeActivations(calibration=calibration, **kw),), ctx)
    return m.funcs["f"]


def _scales(g) -> dict[str, dict[int, float]]:
    return {n.result.name: quantized_operands(n) for n in g.nodes if quantized_operands(n)}


def test_the_scale_is_the_max_over_every_sample():
    """%g = relu(W1 x): sample 0 gives max 2.75 (the docstring's), sample 1 = -2 x gives
    h = [[-2.5, 1], [1.75, -5.5]] whose relu peaks at 1.75, sample 2 = 3 x peaks at 8.25:
    the scale is fp16(8.25 / 127): 8.25 / 127 = 0.0649606 is 1064.3 steps of 2^-14 (the fp16
    spacing between 2^-4 and 2^-3), so 1064 * 2^-14."""
    x0 = np.array([[[[1.0, -2.0]], [[0.5, 3.0]]]], np.float32)
    g = _run(CHAIN, {"x": np.stack([x0, -2 * x0, 3 * x0])})
    assert scale_for(8.25)[0] == 1064 * 2.0 ** -14
    assert _scales(g) == {"y": {0: 1064 * 2.0 ** -14}}
    rows = {t["value"]: t for t in g.facts.activations["tensors"]}
    assert rows["g"]["max_abs"] == 8.25 and rows["g"]["dtype"] == "int8" and rows["g"]["consumers"] == ["y"]
    assert g.facts.activations["samples"] == 3


def test_what_stays_fp16_and_why():
    """The func's input is a program input; %g @ %y is a product of two activations (never a
    candidate, so not in the report)."""
    g = _run(CHAIN, {"x": np.ones((1, 2, 1, 2), np.float32)})
    rows = {t["value"]: t for t in g.facts.activations["tensors"]}
    assert set(rows) == {"x", "g"}
    assert rows["x"]["dtype"] == "fp16" and "program input" in rows["x"]["reason"]
    assert not quantized_operands(next(n for n in g.nodes if n.op == "matmul"))


def _outlier_calibration(seed=0):
    """4 samples of normal inputs; %b's has one element of 1000 in sample 0: its scale (7.9)
    turns the other samples' %b (below 4) into zeros."""
    rng = np.random.default_rng(seed)
    x1 = rng.standard_normal((4, 1, 8, 1, 16)).astype(np.float32)
    x2 = rng.standard_normal((4, 1, 8, 1, 16)).astype(np.float32)
    x2[0, 0, 3, 0, 5] = 1000.0
    weights = WeightStore({"wa": (rng.standard_normal((8, 8, 1, 1)) / 3).astype(np.float16),
                           "wb": (rng.standard_normal((8, 8, 1, 1)) / 3).astype(np.float16)})
    return {"x1": x1, "x2": x2}, weights


@pytest.mark.constraint("ANE-INT8-ACTIVATIONS")
def test_the_gate_drops_the_outlier_heavy_activation():
    calib, weights = _outlier_calibration()
    g = _run(TWO, calib, weights)
    rows = {t["value"]: t for t in g.facts.activations["tensors"]}
    assert rows["a"]["dtype"] == "int8" and rows["b"]["dtype"] == "fp16"
    assert "output yb cosine" in rows["b"]["reason"] and "largest int8 error" in rows["b"]["reason"]
    assert rows["b"]["rel_l2"] > 0.5 > 0.05 > rows["a"]["rel_l2"]
    assert set(_scales(g)) == {"ya"}
    outs = {o["output"]: o for o in g.facts.activations["outputs"]}
    assert min(o["cosine"] for o in outs.values()) >= 0.999


def test_without_the_gate_the_outlier_activation_stays_int8_and_ruins_its_output():
    """The same calibration with a gate that accepts anything: what the gate prevents."""
    calib, weights = _outlier_calibration()
    g = _run(TWO, calib, weights, min_cosine=-1.0)
    assert set(_scales(g)) == {"ya", "yb"}
    outs = {o["output"]: o for o in g.facts.activations["outputs"]}
    assert outs["yb"]["cosine"] < 0.5 < 0.999 < outs["ya"]["cosine"]


def test_running_the_pass_again_decides_anew():
    calib, weights = _outlier_calibration()
    m = parse(TWO, "t.ir")
    ctx = PassContext.default(weights=weights)
    run_pipeline(m, (QuantizeActivations(calibration=calib, min_cosine=-1.0),), ctx)
    run_pipeline(m, (QuantizeActivations(calibration=calib),), ctx)
    assert set(_scales(m.funcs["f"])) == {"ya"}


@pytest.mark.parametrize("calib,needle", [
    ({"x1": np.zeros((1, 8, 1, 16))}, "the calibration inputs have no 'x2' for func 'f'"),
    ({"x1": np.zeros((2, 1, 8, 1, 16)), "x2": np.zeros((3, 1, 8, 1, 16))}, "different numbers of samples"),
    ({"x1": np.zeros((1, 8, 1, 15)), "x2": np.zeros((1, 8, 1, 16))}, "has shape [1, 8, 1, 15]"),
])
def test_calibration_inputs_that_do_not_fit_are_errors(calib, needle):
    _, weights = _outlier_calibration()
    with pytest.raises(AnecError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        _run(TWO, calib, weights)


def test_weights_are_needed_to_calibrate():
    calib, _ = _outlier_calibration()
    with pytest.raises(AnecError, match="calibrated by running the func, which needs its weights"):
        _run(TWO, calib, None)


def test_outputs_that_overflow_without_int8_are_an_error():
    calib, weights = _outlier_calibration()
    calib["x2"][1, 0, 0, 0, 0] = 60000.0
    big = WeightStore({"wa": np.asarray(weights["wa"]), "wb": np.full((8, 8, 1, 1), 8.0, np.float16)})
    with pytest.raises(AnecError, match="output yb is not finite on the calibration inputs"):
        _run(TWO, calib, big)


def test_the_pass_runs_right_before_emit_mil():
    spec = ActivationSpec("int8", {"x": np.zeros(1)})
    names = [p.name for p in with_activation_quant(DEFAULT, spec)]
    assert names[-2:] == ["quantize-activations", "emit-mil"] and names[-3] == "partition"


def test_a_func_whose_inputs_the_calibration_does_not_name_stays_fp16():
    """Calibration inputs for another func of the module: nothing is quantized, and the report
    says why for every candidate."""
    g = _run(CHAIN, {"other": np.ones((1, 2, 1, 2), np.float32)})
    assert not _scales(g)
    rows = {t["value"]: t for t in g.facts.activations["tensors"]}
    assert rows["g"]["dtype"] == "fp16" and rows["g"]["reason"] == "no calibration inputs for func 'f' (it takes x)"
    assert "program input" in rows["x"]["reason"] and g.facts.activations["samples"] == 0
