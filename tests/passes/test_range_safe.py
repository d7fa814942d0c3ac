"""The range-safe pass: meaning kept, forms matched, idempotent; the range analysis.

Numerics on the sim at every magnitude: tests/runtime/test_rt_fp16_range.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.diagnostics import AnecError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.passes import PassContext, RangeSafe, run_pipeline
from anec.ranges import check_ranges, load_calibration
from tests.runtime.test_rt_fp16_range import NORMS, reference, rows


def safe(text: str):
    m = parse(text, "n.ir")
    run_pipeline(m, (RangeSafe(),), PassContext.default())
    return m


@pytest.mark.parametrize("func", ["rms", "rms_pow", "ln", "l2", "std", "var"])
def test_the_rewrite_keeps_the_meaning_and_removes_every_square_of_x(func):
    before = parse(NORMS, "n.ir")
    after = safe(NORMS)
    g = after.funcs[func]
    squares = [n for n in g.nodes if n.op in ("mul", "pow") and n.operands[0].name == "xh"
               and (n.operands[1].name == "xh" or n.op == "pow")]
    assert not squares and any(n.op == "reduce_max" for n in g.nodes)
    x = rows(1.0, 3)
    want = interpret(before.funcs[func], {"x": x})
    got = interpret(g, {"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5 * np.abs(want[k]).max())
    for k, r in zip(want, reference(func, x)):
        np.testing.assert_allclose(got[k].reshape(r.shape), r, rtol=1e-3, atol=1e-6)


def test_running_it_twice_changes_nothing_more():
    once = print_module(safe(NORMS))
    m = parse(once, "once.ir")
    run_pipeline(m, (RangeSafe(),), PassContext.default())
    assert print_module(m) == once


def test_a_reduction_of_other_values_is_left_alone():
    text = """
func f(%x: fp16[1, 8, 1, 4], %z: fp16[1, 8, 1, 4]) {
  %p = mul(%x, %z)
  %s = reduce_sum(%p, axes=[1], keep_dims=true)
  %m = reduce_mean(%x, axes=[1], keep_dims=true)
  return %s, %m
}
"""
    assert print_module(safe(text)) == print_module(parse(text, "n.ir"))


CALIB = """
func f(%x: fp32[1, 16, 1, 4]) {
  %xh = cast(%x, dtype=fp16)
  %sq = mul(%xh, %xh)
  %ms = reduce_mean(%sq, axes=[1], keep_dims=true)
  %eps = const(value=1e-05) : fp16[]
  %me = add(%ms, %eps)
  %r = rsqrt(%me)
  %n = mul(%xh, %r)
  %k = const(value=3000.0) : fp16[]
  %a = mul(%xh, %k)
  %b = add(%a, %n)
  %t = const(value=0.0001) : fp16[]
  %c = mul(%n, %t)
  %d = mul(%c, %t)
  %y = cast(%b, dtype=fp32)
  %z = cast(%d, dtype=fp32)
  return %y, %z
}
"""


@pytest.mark.constraint("ANE-FP16-RANGE")
def test_range_analysis_finds_the_first_overflow_and_the_lost_bits():
    m = parse(CALIB, "calib.ir")
    x = np.random.default_rng(0).standard_normal((1, 16, 1, 4)).astype(np.float32) * 30
    (rep,) = check_ranges(m, {"x": x})
    kinds = [(f.node, f.kind) for f in rep.findings]
    # the norm is safe (range-safe ran first); %a overflows, %b only inherits it; %d underflows
    assert kinds == [("a", "overflow"), ("d", "precision")]
    err = rep.findings[0].diagnostic().render()
    assert err.startswith("calib.ir:11:8: error: [ANE-FP16-RANGE] %a (mul) reaches |x| = ")
    assert "^^^" in err and "hint: " in err
    # small inputs: nothing overflows
    (rep,) = check_ranges(m, {"x": x / 1000})
    assert not rep.errors


def test_check_inputs_on_the_command_line(tmp_path):
    ir = tmp_path / "calib.ir"
    ir.write_text(CALIB)
    x = np.random.default_rng(0).standard_normal((1, 16, 1, 4)).astype(np.float32)
    np.savez(tmp_path / "big.npz", x=x * 30)
    np.savez(tmp_path / "small.npz", x=x * 0.01)
    r = CliRunner().invoke(main, ["check", str(ir), "--inputs", str(tmp_path / "big.npz")])
    assert r.exit_code == 1, r.output
    assert "[ANE-FP16-RANGE] %a (mul) reaches" in r.output
    assert "1 node overflow fp16 on the calibration inputs" in r.output
    r = CliRunner().invoke(main, ["check", str(ir), "--inputs", str(tmp_path / "small.npz")])
    assert r.exit_code == 0, r.output
    assert "0 overflows" in r.output or "every value fits fp16" in r.output
    mlp = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt2_mlp.ir")
    xm = np.random.default_rng(2).standard_normal((1, 768, 1, 64)).astype(np.float32)
    xm[0, 3] *= 2000  # a massive channel: the LayerNorm is range-safe, nothing overflows
    np.savez(tmp_path / "mlp.npz", x=xm)
    r = CliRunner().invoke(main, ["check", mlp, "--inputs", str(tmp_path / "mlp.npz"), "--random-weights", "0"])
    assert r.exit_code == 0, r.output
    assert "every value fits fp16" in r.output and "weight values: not checked" not in r.output
    np.savez(tmp_path / "wrong.npz", q=x)
    r = CliRunner().invoke(main, ["check", str(ir), "--inputs", str(tmp_path / "wrong.npz")])
    assert r.exit_code == 1 and "not the inputs of any func (f: x)" in r.output
    assert "Traceback" not in r.output


def test_calibration_files_are_read_as_hostile(tmp_path):
    fifo = tmp_path / "x.npz"
    os.mkfifo(fifo)
    with pytest.raises(AnecError, match="is a FIFO, not a regular file"):
        load_calibration(str(fifo))  # refused at once, never blocks
    obj = tmp_path / "obj.npz"
    np.savez(obj, x=np.array([object()], dtype=object))
    with pytest.raises(AnecError, match="not a .npz/.npy of numeric arrays"):
        load_calibration(str(obj))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(AnecError, match="junk.npz"):
        load_calibration(str(junk))
    with pytest.raises(AnecError, match="cannot read calibration inputs"):
        load_calibration(str(tmp_path / "missing.npz"))
    np.save(tmp_path / "x.npy", np.ones((2, 2), np.float32))
    assert list(load_calibration(str(tmp_path / "x.npy"))) == ["x"]


BARE = """
func f(%x: fp16[1, 8, 1, 4]) {
  %sq = mul(%x, %x)
  %e = const(value=-0.001) : fp16[]
  %t = add(%sq, %e)
  %k = const(value=2.0) : fp16[]
  %u = mul(%t, %k)
  %a = sqrt(%u)
  return %a
}
"""


def test_a_bare_square_with_a_factor_and_a_negative_eps():
    """sqrt(2 * (x * x - 0.001)) elementwise (a norm over a size-1 dim): no x * x left, and the
    same numbers at |x| = 30000, where x * x overflows."""
    m = safe(BARE)
    g = m.funcs["f"]
    assert not any(n.op == "mul" and n.operands[0].name == "x" and n.operands[1].name == "x" for n in g.nodes)
    x = np.array([0.5, -2.0, 30000.0, -30000.0, 100.0, 1.0, -1.0, 0.25] * 4, np.float16).reshape(1, 8, 1, 4)
    want = np.sqrt(2.0 * (x.astype(np.float64) ** 2 - 0.001))
    got = interpret(g, {"x": x}, mode="fp16")["a"]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=3e-3)
    before = interpret(parse(BARE, "n.ir").funcs["f"], {"x": x}, mode="fp16")["a"]
    assert np.isinf(before.astype(np.float64)).any()


CANCEL = """
func f(%a: fp32[1, 8, 1, 4], %b: fp32[1, 8, 1, 4]) {
  %ah = cast(%a, dtype=fp16)
  %bh = cast(%b, dtype=fp16)
  %k = const(value=3.0) : fp16[]
  %a3 = mul(%ah, %k)
  %b3 = mul(%bh, %k)
  %d = sub(%a3, %b3)
  %y = cast(%d, dtype=fp32)
  return %y
}
"""


def test_range_analysis_finds_a_difference_of_large_values():
    """3a - 3b with a, b fp16 numbers near 1000 (0 or 0.5 apart): fp16 rounds 3a and 3b to a
    multiple of 2 (the spacing near 3000), so the difference, at most 1.5, is off by up to 1:
    most of its bits are lost."""
    m = parse(CANCEL, "cancel.ir")
    rng = np.random.default_rng(1)
    a = (1000 + rng.standard_normal((1, 8, 1, 4))).astype(np.float32)
    b = a + np.float32(0.4)
    (rep,) = check_ranges(m, {"a": a.astype(np.float16).astype(np.float32),
                              "b": b.astype(np.float16).astype(np.float32)})
    assert [(f.node, f.kind) for f in rep.findings] == [("d", "precision")]
    text = rep.findings[0].diagnostic().render()
    assert text.startswith("cancel.ir:8:8: warning: [ANE-FP16-RANGE] %d (sub)") and "bits lost" in text
    (rep,) = check_ranges(m, {"a": np.full((1, 8, 1, 4), 1.0, np.float32),
                              "b": np.full((1, 8, 1, 4), 0.5, np.float32)})
    assert not rep.findings
