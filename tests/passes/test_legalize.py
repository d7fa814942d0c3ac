"""legalize: every rewrite rule (fires, preserves outputs, must-not-fire cases) and every
compile-time constraint error (id, span, suggestion)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anec.diagnostics import ConstraintError
from anec.ir.types import DType
from anec.passes import Legalize, PassContext, Partition
from anec.passes.legalize_rules import GELU_TANH_MAX_ABS_ERROR
from anec.targets import get_target
from anec.weight_store import WeightStore

from .passes_util import compare, ops_of, parse_func, run, text_of, weights_for

M4 = get_target("m4")


def legalize(text: str, target=M4, weights=None, **options):
    """Parse, legalize and partition; (before, after, ctx)."""
    g = parse_func(text)
    before = g.clone()
    w = weights if weights is not None else weights_for(g)
    ctx = PassContext(target=target, weights=w, options=options)
    run((Legalize(), Partition()), g, ctx)
    return before, g, ctx


def reject(text: str, target=M4, weights=None, **options) -> ConstraintError:
    g = parse_func(text)
    w = weights if weights is not None else weights_for(g)
    with pytest.raises(ConstraintError) as info:
        run(Legalize(), g, PassContext(target=target, weights=w, options=options))
    return info.value


def rules(ctx) -> list[tuple[str, str]]:
    return [(r["rule"], r["constraint"]) for r in ctx.rewrites]


# ---- unary ops the ANE lacks ------------------------------------------------------------

GELU = """
func f(%x: fp16[1, 8, 1, 16]) {
  %g = gelu(%x, mode="MODE") : fp16[1, 8, 1, 16]
  return %g
}"""


@pytest.mark.constraint("ANE-GELU")
def test_gelu_tanh_is_expanded():
    before, g, ctx = legalize(GELU.replace("MODE", "tanh"))
    assert "gelu" not in ops_of(g) and "tanh" in ops_of(g)
    assert g.output_names() == ["g"]
    assert rules(ctx) == [("expand_gelu_tanh", "ANE-GELU")]
    assert "exact" in ctx.rewrites[0]["detail"]
    x = np.linspace(-6, 6, 128, dtype=np.float32).reshape(1, 8, 1, 16)
    # the formula's constants are fp16 consts: ~1e-4 from rounding 0.044715 and sqrt(2/pi)
    compare(before, g, WeightStore({}), inputs={"x": x}, rtol=0, atol=2e-4)


@pytest.mark.constraint("ANE-GELU")
def test_exact_gelu_is_approximated():
    before, g, ctx = legalize(GELU.replace("MODE", "exact"))
    assert "gelu" not in ops_of(g)
    rec = ctx.rewrites[0]
    assert rec["constraint"] == "ANE-GELU" and "approximation" in rec["detail"]
    assert rec["location"] == "test.ir:3:8" and rec["node"] == "g"
    x = np.linspace(-6, 6, 128, dtype=np.float32).reshape(1, 8, 1, 16)
    err = compare(before, g, WeightStore({}), inputs={"x": x}, rtol=0,
                  atol=GELU_TANH_MAX_ABS_ERROR + 2e-4)
    assert err > 1e-4  # it is an approximation, and the record says so


def test_gelu_tanh_max_error_constant_is_right():
    x = np.linspace(-10, 10, 400001)
    exact = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    approx = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert abs(np.abs(exact - approx).max() - GELU_TANH_MAX_ABS_ERROR) < 1e-5


@pytest.mark.constraint("ANE-RSQRT")
def test_rsqrt_becomes_pow():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 8, 1, 8]) {
  %s = mul(%x, %x) : fp16[1, 8, 1, 8]
  %one = const(value=1.0) : fp16[]
  %p = add(%s, %one) : fp16[1, 8, 1, 8]
  %r = rsqrt(%p) : fp16[1, 8, 1, 8]
  return %r
}""")
    assert "rsqrt" not in ops_of(g)
    assert "%r = pow(%p, %r_e) : fp16[1, 8, 1, 8]" in text_of(g)
    assert "%r_e = const(value=-0.5) : fp16[]" in text_of(g)
    assert rules(ctx) == [("rsqrt_to_pow", "ANE-RSQRT")]
    compare(before, g, WeightStore({}), rtol=1e-6, atol=0)


@pytest.mark.constraint("ANE-NEG")
def test_neg_becomes_mul():
    before, g, ctx = legalize("""
func f(%x: fp32[1, 8, 1, 8]) {
  %n = neg(%x) : fp32[1, 8, 1, 8]
  return %n
}""")
    assert ops_of(g) == ["const", "mul"]
    assert g.nodes[0].attrs == {"value": -1.0}
    assert rules(ctx) == [("neg_to_mul", "ANE-NEG")]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


@pytest.mark.constraint("ANE-LIVE-OUTPUTS")
def test_rewrite_of_returned_value_keeps_its_name():
    _, g, _ = legalize("""
func f(%x: fp16[1, 8, 1, 8]) {
  %a = neg(%x) : fp16[1, 8, 1, 8]
  %b = relu(%a) : fp16[1, 8, 1, 8]
  return %a, %b
}""")
    assert g.output_names() == ["a", "b"]
    assert g.outputs[0].producer.op == "mul"


# ---- conv ----------------------------------------------------------------------------

@pytest.mark.constraint("ANE-CONV-BIAS")
def test_conv_bias_becomes_add():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 16, 1, 8]) {
  %w = const(weight="w") : fp16[32, 16, 1, 1]
  %b = const(weight="b") : fp16[1, 32, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 32, 1, 8]
  return %h
}""")
    assert ops_of(g) == ["const", "const", "conv1x1", "add"]
    assert not any(n.optional for n in g.nodes)
    assert "%h = add(%h_conv, %b)" in text_of(g)
    assert rules(ctx) == [("split_conv_bias", "ANE-CONV-BIAS")]
    compare(before, g, ctx.weights, rtol=1e-6, atol=1e-6)


def test_conv_without_bias_is_untouched():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 16, 1, 8]) {
  %w = const(weight="w") : fp16[32, 16, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 32, 1, 8]
  return %h
}""")
    assert g == before and ctx.rewrites == []


TIGHT = M4.replace(max_conv_out_channels=8)


@pytest.mark.constraint("ANE-CONV-CHANNELS")
def test_wide_returned_conv_is_chunked():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %b = const(weight="b") : fp16[1, 20, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 20, 1, 8]
  %y = cast(%h, dtype=fp32) : fp32[1, 20, 1, 8]
  return %y
}""", target=TIGHT)
    assert g.output_names() == ["y__c0", "y__c1", "y__c2"]
    assert [o.type.shape[1] for o in g.outputs] == [7, 7, 6]
    assert g.facts.logical_outputs == [{"name": "y", "axis": 1,
                                          "pieces": ["y__c0", "y__c1", "y__c2"],
                                          "dtype": "fp32", "shape": [1, 20, 1, 8]}]
    slices = [n.attrs.get("slice") for n in g.nodes if n.op == "const"]
    assert [0, 0, 7] in slices and [0, 14, 20] in slices and [1, 7, 14] in slices
    assert all(n.result.type.shape[1] <= 8 for n in g.nodes if n.op == "conv1x1")
    assert not any(n.optional for n in g.nodes)  # chunk biases were split off too
    assert ("chunk_wide_conv_output", "ANE-CONV-CHANNELS") in rules(ctx)
    compare(before, g, ctx.weights, rtol=1e-6, atol=1e-6)


@pytest.mark.constraint("ANE-CONV-CHANNELS")
def test_wide_internal_conv_is_rejected():
    err = reject("""
func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 20, 1, 8]
  %s = reduce_sum(%h, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
  return %s
}""", target=TIGHT)
    assert err.constraint == "ANE-CONV-CHANNELS"
    assert err.span.location == "test.ir:4:8"
    assert "20 output channels" in err.message and "used inside the program" in err.message
    assert "return the conv result as its own output" in err.hint


@pytest.mark.constraint("ANE-CONV-CHANNELS")
def test_wide_conv_input_is_split():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 20, 1, 8]) {
  %w = const(weight="w") : fp16[4, 20, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 4, 1, 8]
  return %h
}""", target=TIGHT)
    convs = [n for n in g.nodes if n.op == "conv1x1"]
    assert len(convs) == 3 and all(c.operands[0].type.shape[1] <= 8 for c in convs)
    assert ops_of(g).count("slice") == 3
    assert ("split_wide_conv_input", "ANE-CONV-CHANNELS") in rules(ctx)
    compare(before, g, ctx.weights, rtol=1e-5, atol=1e-5)


# ---- matmul -> conv ----------------------------------------------------------------------

@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.constraint("ANE-CONV-FASTER")
def test_matmul_with_const_weight_becomes_conv(tx, ty):
    xs = "[2, 16, 6]" if tx else "[2, 6, 16]"
    ws = "[12, 16]" if ty else "[16, 12]"
    before, g, ctx = legalize(f"""
func f(%x: fp32{xs}) {{
  %w = const(weight="w") : fp32{ws}
  %y = matmul(%x, %w, transpose_x={str(tx).lower()}, transpose_y={str(ty).lower()}) : fp32[2, 6, 12]
  return %y
}}""")
    assert "matmul" not in ops_of(g) and "conv1x1" in ops_of(g)
    w = next(n for n in g.nodes if n.op == "const")
    assert w.result.type.shape == (12, 16, 1, 1)
    assert w.attrs.get("perm") == (None if ty else [1, 0])
    assert rules(ctx) == [("matmul_const_to_conv", "ANE-CONV-FASTER"),
                          ("reshape_io_to_rank4", "ANE-IO-RANK4"), ("reshape_io_to_rank4", "ANE-IO-RANK4")]
    compare(before, g, ctx.weights, rtol=1e-5, atol=1e-5)


@pytest.mark.constraint("ANE-CONV-FASTER")
def test_matmul_with_const_left_operand_becomes_conv():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 16, 8]) {
  %w = const(weight="w") : fp16[24, 16]
  %y = matmul(%w, %x) : fp16[1, 24, 8]
  return %y
}""")
    # the ANE layout already: with the rank-4 I/O the conv reads and returns the device
    # tensors directly (no transpose, and the reshapes in and out cancel)
    assert ops_of(g) == ["const", "conv1x1"]
    assert [str(v.type) for v in (*g.inputs, *g.outputs)] == ["fp16[1, 16, 1, 8]", "fp16[1, 24, 1, 8]"]
    assert "perm" not in g.nodes[0].attrs
    compare(before, g, ctx.weights, rtol=1e-5, atol=1e-5)


def test_matmul_layout_ops_fold_away_in_ane_layout():
    before, g, _ = legalize("""
func f(%x: fp16[1, 16, 1, 8]) {
  %x3 = reshape(%x, shape=[1, 16, 8]) : fp16[1, 16, 8]
  %rows = transpose(%x3, perm=[0, 2, 1]) : fp16[1, 8, 16]
  %w = const(weight="w") : fp16[16, 32]
  %y = matmul(%rows, %w) : fp16[1, 8, 32]
  return %y
}""")
    # transpose(transpose) and reshape(reshape) compose: the conv reads %x directly
    conv = next(n for n in g.nodes if n.op == "conv1x1")
    assert conv.operands[0].name == "x"
    compare(before, g, weights_for(before), rtol=1e-5, atol=1e-5)


def test_matmul_of_two_activations_is_not_rewritten():
    before, g, ctx = legalize("""
func f(%a: fp16[1, 4, 8, 16], %b: fp16[1, 4, 16, 8]) {
  %y = matmul(%a, %b) : fp16[1, 4, 8, 8]
  return %y
}""")
    assert g == before and ctx.rewrites == []


def test_matmul_wider_than_conv_limit_is_not_rewritten():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 8, 4]) {
  %w = const(weight="w") : fp16[4, 20]
  %y = matmul(%x, %w) : fp16[1, 8, 20]
  return %y
}""", target=TIGHT)
    assert "matmul" in ops_of(g) and "conv1x1" not in ops_of(g)
    assert rules(ctx) == [("reshape_io_to_rank4", "ANE-IO-RANK4")] * 2  # only the I/O changes


def test_matmul_weight_with_existing_perm_composes():
    store = WeightStore({"w": np.random.default_rng(0).normal(size=(12, 16)).astype(np.float32)})
    before, g, _ = legalize("""
func f(%x: fp32[4, 16]) {
  %w = const(weight="w", perm=[1, 0]) : fp32[16, 12]
  %y = matmul(%x, %w) : fp32[4, 12]
  return %y
}""", weights=store)
    w = next(n for n in g.nodes if n.op == "const")
    assert "perm" not in w.attrs  # [1, 0] then [1, 0] is the stored layout
    compare(before, g, store, rtol=1e-5, atol=1e-5)


# ---- concat ----------------------------------------------------------------------------

@pytest.mark.constraint("ANE-CONCAT")
def test_concat_feeding_convs_becomes_partial_convs():
    before, g, ctx = legalize("""
func f(%a: fp16[1, 8, 1, 16], %b: fp16[1, 4, 1, 16]) {
  %c = concat(%a, %b, axis=1) : fp16[1, 12, 1, 16]
  %w1 = const(weight="w1") : fp16[6, 12, 1, 1]
  %b1 = const(weight="b1") : fp16[1, 6, 1, 1]
  %w2 = const(weight="w2") : fp16[3, 12, 1, 1]
  %y1 = conv1x1(%c, %w1, bias=%b1) : fp16[1, 6, 1, 16]
  %y2 = conv1x1(%c, %w2) : fp16[1, 3, 1, 16]
  return %y1, %y2
}""")
    assert "concat" not in ops_of(g)
    assert ops_of(g).count("conv1x1") == 4
    slices = sorted(tuple(n.attrs["slice"]) for n in g.nodes if "slice" in n.attrs)
    assert slices == [(1, 0, 8), (1, 0, 8), (1, 8, 12), (1, 8, 12)]
    assert g.output_names() == ["y1", "y2"]
    assert ("split_concat_into_partial_convs", "ANE-CONCAT") in rules(ctx)
    compare(before, g, ctx.weights, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body,why", [
    ("""%c = concat(%a, %a, axis=3) : fp16[1, 8, 1, 32]
  %y = relu(%c) : fp16[1, 8, 1, 32]""", "joins along axis 3"),
    ("""%c = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]
  %y = relu(%c) : fp16[1, 16, 1, 16]""", "it feeds relu"),
    ("""%y = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]""", "it is returned"),
])
@pytest.mark.constraint("ANE-CONCAT")
def test_other_concat_is_rejected(body, why):
    err = reject(f"""
func f(%a: fp16[1, 8, 1, 16]) {{
  {body}
  return %y
}}""")
    assert err.constraint == "ANE-CONCAT"
    assert why in err.message
    assert err.span.location == "test.ir:3:8"
    assert err.hint and "[ANE-CONCAT]" in err.render()


# ---- split --------------------------------------------------------------------------------

@pytest.mark.constraint("ANE-SPLIT")
def test_split_becomes_slices():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 12, 1, 8]) {
  %a, %b, %c = split(%x, axis=-3, sizes=[2, 4, 6]) : fp16[1, 2, 1, 8], fp16[1, 4, 1, 8], fp16[1, 6, 1, 8]
  %r = relu(%b) : fp16[1, 4, 1, 8]
  return %a, %r, %c
}""")
    assert "split" not in ops_of(g)
    slices = [n for n in g.nodes if n.op == "slice"]
    assert [(n.result.name, n.attrs["begin"], n.attrs["end"]) for n in slices] == [
        ("a", [0, 0, 0, 0], [1, 2, 1, 8]), ("b", [0, 2, 0, 0], [1, 6, 1, 8]),
        ("c", [0, 6, 0, 0], [1, 12, 1, 8])]
    assert g.output_names() == ["a", "r", "c"]  # returned results keep their names
    assert rules(ctx) == [("split_to_slices", "ANE-SPLIT")]
    rec = ctx.rewrites[0]
    assert rec["node"] == "a" and rec["location"] == "test.ir:3:16"
    assert rec["detail"] == "split into 3 along axis 1 -> 3 slices (%a, %b, %c)"
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_split_result_nobody_reads_gets_no_slice():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 4, 1, 10]) {
  %a, %b = split(%x, axis=3, sizes=[3, 7]) : fp16[1, 4, 1, 3], fp16[1, 4, 1, 7]
  %y = exp(%b) : fp16[1, 4, 1, 7]
  return %y
}""")
    assert ops_of(g) == ["slice", "exp"]
    assert g.nodes[0].attrs["begin"] == [0, 0, 0, 3] and g.nodes[0].result.name == "b"
    assert "-> 1 slice (%b)" in ctx.rewrites[0]["detail"]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


# ---- rank-4 I/O ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape, device", [
    ([], [1, 1, 1, 1]), ([5], [1, 1, 1, 5]), ([3, 5], [1, 3, 1, 5]), ([2, 3, 5], [1, 6, 1, 5]),
    ([2, 1, 3, 2, 5], [1, 12, 1, 5]),
])
@pytest.mark.constraint("ANE-IO-RANK4")
def test_io_of_other_ranks_becomes_rank4(shape, device):
    t = f"fp16{shape}"
    before, g, ctx = legalize(f"""
func f(%x: {t}, %m: fp16[1, 1, 8, 8]) {{
  %y = tanh(%x) : {t}
  %n = relu(%m) : fp16[1, 1, 8, 8]
  return %y, %n
}}""")
    x, m = g.inputs
    assert (x.name, list(x.type.shape)) == ("x", device)
    assert list(m.type.shape) == [1, 1, 8, 8]  # rank 4 stays as it is, even when not [1, C, 1, S]
    assert g.output_names() == ["y", "n"]  # the device binds I/O by name: names never change
    assert list(g.outputs[0].type.shape) == device and g.outputs[0].producer.op == "reshape"
    # a scalar input is read back by a one-element reduce_sum (no empty reshape shape)
    assert ops_of(g) == ["reduce_sum" if not shape else "reshape", "tanh", "relu", "reshape"]
    assert g.facts.logical_inputs == [{"name": "x", "dtype": "fp16", "shape": shape}]
    assert g.facts.logical_outputs == [{"name": "y", "axis": None, "pieces": ["y"],
                                          "dtype": "fp16", "shape": shape}]
    assert rules(ctx) == [("reshape_io_to_rank4", "ANE-IO-RANK4")] * 2
    assert [r["node"] for r in ctx.rewrites] == ["x", "y"]
    assert ctx.rewrites[0]["location"] == "test.ir:2:8"
    assert ctx.rewrites[1]["location"] == "test.ir:5:3"  # the return statement
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_rank4_io_reshapes_cancel_against_user_reshapes():
    before, g, ctx = legalize("""
func f(%x: fp16[6, 8], %s: fp16[]) {
  %x4 = reshape(%x, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %x3 = reshape(%x, shape=[2, 3, 8]) : fp16[2, 3, 8]
  %a = mul(%x4, %s) : fp16[1, 6, 1, 8]
  %b = relu(%x3) : fp16[2, 3, 8]
  %a2 = reshape(%a, shape=[6, 8]) : fp16[6, 8]
  %c = exp(%b) : fp16[2, 3, 8]
  %t = reduce_sum(%c, axes=[0, 1, 2]) : fp16[]
  return %a2, %t
}""")
    # %x4 is %x on the device; %x3 reads the device input; %a2 is returned as %a itself
    assert "x4" not in {v.name for v in g.values()}
    assert next(n for n in g.nodes if n.result.name == "x3").operands[0] is g.inputs[0]
    assert g.outputs[0].producer.op == "mul" and g.output_names() == ["a2", "t"]
    assert ops_of(g) == ["reduce_sum", "reshape", "mul", "relu", "exp", "reduce_sum", "reshape"]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_rank4_io_with_host_casts_on_m1():
    before, g, ctx = legalize("""
func f(%x: fp32[4, 8]) {
  %y = sigmoid(%x) : fp32[4, 8]
  return %y
}""", target=get_target("m1"), host_casts=True)
    assert [str(v.type) for v in (*g.inputs, *g.outputs)] == ["fp16[1, 4, 1, 8]", "fp16[1, 4, 1, 8]"]
    assert g.output_names() == ["y"]
    assert [c["name"] for c in g.facts.host_casts] == ["x", "y"]
    feeds = {"x": np.linspace(-3, 3, 32, dtype=np.float32).reshape(4, 8)}
    compare(before, g, WeightStore({}), rtol=2e-3, atol=2e-3, inputs=feeds)


# ---- reduce_mean, softmax switches -----------------------------------------------------------

@pytest.mark.constraint("ANE-REDUCE-MEAN")
def test_reduce_mean_lowered_scale_first():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 768, 1, 4]) {
  %m = reduce_mean(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 4]
  return %m
}""")
    assert ops_of(g) == ["const", "mul", "reduce_sum"]
    assert g.nodes[0].attrs["value"] == pytest.approx(1 / 768)
    assert g.nodes[2].operands[0] is g.nodes[1].result  # scaled before summing
    assert rules(ctx) == [("lower_reduce_mean", "ANE-REDUCE-MEAN")]
    # values whose fp16 sum overflows (768 * 100 > 65504) still give the right mean
    x = np.full((1, 768, 1, 4), 100.0, np.float32)
    from anec.ir.interp import interpret
    got = interpret(g, {"x": x}, WeightStore({}), mode="fp16")["m"]
    assert np.isfinite(got).all() and np.allclose(got, 100.0, rtol=2e-3)
    compare(before, g, WeightStore({}), rtol=1e-3, atol=1e-3)


def test_reduce_mean_kept_when_target_switch_is_off():
    text = """
func f(%x: fp16[1, 64, 1, 4]) {
  %m = reduce_mean(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 4]
  return %m
}"""
    before, g, ctx = legalize(text, target=M4.replace(reduce_mean_as_sum=False))
    assert g == before and ctx.rewrites == []


SOFTMAX = """
func f(%x: fp16[1, 4, 1, N]) {
  %p = softmax(%x, axis=-1) : fp16[1, 4, 1, N]
  return %p
}"""


@pytest.mark.constraint("ANE-SOFTMAX-POW2")
def test_softmax_pow2_switch():
    on = M4.replace(softmax_pow2_only=True)
    err = reject(SOFTMAX.replace("N", "48"), target=on)
    assert err.constraint == "ANE-SOFTMAX-POW2" and "pad axis 3 to 64" in err.hint
    legalize(SOFTMAX.replace("N", "64"), target=on)       # a power of two: fine
    legalize(SOFTMAX.replace("N", "48"))                  # off by default (m4)


# ---- I/O dtypes --------------------------------------------------------------------------

IO = """
func f(%x: fp32[1, 64, 1, 64]) {
  %xh = cast(%x, dtype=fp16) : fp16[1, 64, 1, 64]
  %r = relu(%xh) : fp16[1, 64, 1, 64]
  %y = cast(%r, dtype=fp32) : fp32[1, 64, 1, 64]
  return %y
}"""


@pytest.mark.constraint("ANE-FP32-IO")
def test_fp32_io_rejected_on_m1():
    err = reject(IO, target=get_target("m1"))
    assert err.constraint == "ANE-FP32-IO"
    assert err.span.location == "test.ir:2:8"  # the input %x
    assert "--host-casts" in err.hint
    assert any("output %y" in n for n in err.notes)  # the other problem is listed too
    legalize(IO)  # m4 accepts fp32 I/O


@pytest.mark.constraint("ANE-FP32-IO")
def test_host_casts_rewrite_io():
    before, g, ctx = legalize(IO, target=get_target("m1"), host_casts=True)
    assert g.inputs[0].type.dtype == DType.fp16 and g.outputs[0].type.dtype == DType.fp16
    assert ops_of(g) == ["relu"]  # both casts cancelled
    assert g.output_names() == ["y"] and g.nodes[0].operands[0].name == "x"
    assert g.facts.host_casts == [
        {"name": "x", "kind": "input", "host_dtype": "fp32", "program_dtype": "fp16"},
        {"name": "y", "kind": "output", "host_dtype": "fp32", "program_dtype": "fp16"},
    ]
    assert [r["constraint"] for r in ctx.rewrites] == ["ANE-FP32-IO", "ANE-FP32-IO"]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_host_casts_keep_fp32_compute_correct():
    before, g, _ = legalize("""
func f(%x: fp32[1, 64, 1, 64]) {
  %e = exp(%x) : fp32[1, 64, 1, 64]
  return %e
}""", target=get_target("m1"), host_casts=True)
    assert ops_of(g) == ["cast", "exp", "cast"]
    assert g.inputs[0].type.dtype == DType.fp16 and g.output_names() == ["e"]
    # the host now rounds x to fp16 on the way in and e on the way out: that is the only change
    x = np.random.default_rng(0).normal(size=(1, 64, 1, 64)).astype(np.float16)
    compare(before, g, WeightStore({}), inputs={"x": x.astype(np.float32)}, rtol=1e-3, atol=0)


# ---- weights ------------------------------------------------------------------------------

WEIGHTED = """
func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="layer.w") : fp16[4, 4, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 4, 1, 8]
  return %h
}"""


@pytest.mark.constraint("ANE-FP16-RANGE")
def test_weight_outside_fp16_range_is_rejected():
    w = np.ones((4, 4, 1, 1), np.float32)
    w[1, 2] = 7e4
    err = reject(WEIGHTED, weights=WeightStore({"layer.w": w}))
    assert err.constraint == "ANE-FP16-RANGE"
    assert "'layer.w'" in err.message and "70000" in err.message
    assert err.span.location == "test.ir:3:8"
    legalize(WEIGHTED, weights=WeightStore({"layer.w": np.full((4, 4, 1, 1), 65504.0)}))


@pytest.mark.constraint("ANE-FP16-RANGE")
def test_nan_weight_is_rejected():
    w = np.ones((4, 4, 1, 1), np.float32)
    w[0, 0] = np.nan
    w[0, 1] = np.inf
    err = reject(WEIGHTED, weights=WeightStore({"layer.w": w}))
    assert err.constraint == "ANE-FP16-RANGE" and "1 NaN, 1 Inf" in err.message


def many_weights(n: int, scalar: bool) -> str:
    lines = ["func f(%x: fp16[1, 4, 1, 8]) {", "  %h0 = relu(%x) : fp16[1, 4, 1, 8]"]
    for i in range(n):
        lines.append(f'  %g{i} = const(weight="g{i}") : fp16[1, 4, 1, 1]')
        lines.append(f"  %h{i + 1} = mul(%h{i}, %g{i}) : fp16[1, 4, 1, 8]")
    last = f"h{n}"
    if scalar:
        lines.append("  %s = const(value=2.0) : fp16[]")
        lines.append(f"  %h{n + 1} = mul(%h{n}, %s) : fp16[1, 4, 1, 8]")
        last = f"h{n + 1}"
    lines += [f"  return %{last}", "}"]
    return "\n".join(lines)


@pytest.mark.constraint("ANE-BLOB-BUDGET")
def test_blob_budget_cuts_the_func_into_programs():
    _, g, _ = legalize(many_weights(16, scalar=False))
    assert g.facts.partition is None  # 16 fit one m4 program
    _, g, ctx = legalize(many_weights(17, scalar=False))
    plan = g.facts.partition
    assert len(plan.stages) == 2 and sum(len(s.weights) for s in plan.stages) == 17
    rec = [r for r in ctx.rewrites if r["rule"] == "partition"]
    assert len(rec) == 1 and rec[0]["constraint"] == "ANE-BLOB-BUDGET"
    assert "cut into 2 programs" in rec[0]["detail"]


@pytest.mark.constraint("ANE-BLOB-BUDGET")
def test_blob_budget_scalar_penalty():
    _, g, _ = legalize(many_weights(15, scalar=True))
    assert g.facts.partition is None
    _, g, _ = legalize(many_weights(16, scalar=True))  # 15 per program once a mul takes a scalar
    plan = g.facts.partition
    assert len(plan.stages) == 2
    assert all(len(s.weights) <= s.blob_cap for s in plan.stages)
    assert any(s.blob_cap == 15 for s in plan.stages)


SAME_WEIGHT_TWICE = """
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %w2 = const(weight="w") : fp16[4, 4, 1, 1]
  %b = conv1x1(%a, %w2) : fp16[1, 4, 1, 8]
  return %b
}"""
"""Two convs reading weight 'w' through two equal consts."""


def test_identical_weight_consts_are_merged_before_counting():
    before, g, _ = legalize(SAME_WEIGHT_TWICE)
    assert ops_of(g) == ["const", "conv1x1", "conv1x1"]
    compare(before, g, weights_for(before), rtol=0, atol=0)


@pytest.mark.constraint("ANE-ONE-FILE-PER-WEIGHT")
def test_packed_weights_rejected_on_m1():
    text = """
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w1") : fp16[4, 4, 1, 1]
  %w2 = const(weight="w2") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %b = conv1x1(%a, %w2) : fp16[1, 4, 1, 8]
  return %b
}"""
    err = reject(text, target=get_target("m1"), pack_weights=True)
    assert err.constraint == "ANE-ONE-FILE-PER-WEIGHT" and "--pack-weights" in err.hint
    legalize(text, pack_weights=True)  # m4 takes packed files


def test_errors_are_collected_with_the_first_raised():
    err = reject("""
func f(%x: fp16[1, 8, 1, 16]) {
  %c = concat(%x, %x, axis=3) : fp16[1, 8, 1, 32]
  %d = concat(%x, %x, axis=2) : fp16[1, 8, 2, 16]
  %e = reduce_sum(%c, axes=[3]) : fp16[1, 8, 1]
  %f = reduce_sum(%d, axes=[2]) : fp16[1, 8, 16]
  return %e, %f
}""")
    assert err.span.location == "test.ir:3:8"
    assert any(n.startswith("test.ir:4:8: [ANE-CONCAT]") for n in err.notes)


def test_int_reduce_mean_is_rejected_with_a_fix():
    err = reject("""
func f(%x: fp16[1, 6, 1, 4]) {
  %n = cast(%x, dtype=int32) : int32[1, 6, 1, 4]
  %m = reduce_mean(%n, axes=[1]) : int32[1, 1, 4]
  %y = cast(%m, dtype=fp16) : fp16[1, 1, 4]
  return %y
}""")
    assert err.constraint == "ANE-REDUCE-MEAN" and "cast the operand to fp16" in err.hint


def test_records_carry_rule_constraint_node_location_and_func():
    _, _, ctx = legalize("""
func f(%x: fp16[1, 8, 1, 8]) {
  %n = neg(%x) : fp16[1, 8, 1, 8]
  return %n
}""")
    assert ctx.rewrites == [{"rule": "neg_to_mul", "constraint": "ANE-NEG", "node": "n",
                             "location": "test.ir:3:8", "detail": "neg(x) -> mul(x, -1)",
                             "func": "f"}]


@pytest.mark.constraint("ANE-IO-TENSORS")
def test_io_must_be_float_tensors():
    text = """
func f(%n: int32[1, 4, 1, 2], %s: fp16[], %x: fp16[1, 4, 1, 2]) {
  %nf = cast(%n, dtype=fp16) : fp16[1, 4, 1, 2]
  %y = mul(%x, %s) : fp16[1, 4, 1, 2]
  %t = reduce_sum(%y, axes=[0, 1, 2, 3]) : fp16[]
  %i = cast(%nf, dtype=int32) : int32[1, 4, 1, 2]
  %b = cast(%nf, dtype=bool) : bool[1, 4, 1, 2]
  return %t, %i, %b
}"""
    err = reject(text)
    assert err.constraint == "ANE-IO-TENSORS"
    assert err.message == ("input %n is int32 (int32[1, 4, 1, 2]); program inputs and outputs "
                           "must be fp16 or fp32 tensors")
    assert err.span.location == "test.ir:2:8"
    assert err.hint == ("declare %n as fp16 (or fp32) and cast it inside the program: "
                        "cast(%n, dtype=int32)")
    notes = "\n".join(err.notes)
    assert "[ANE-IO-TENSORS] output %i is int32 (int32[1, 4, 1, 2])" in notes
    assert "[ANE-IO-TENSORS] output %b is bool (bool[1, 4, 1, 2])" in notes
    assert "test.ir:8:3:" in notes  # outputs point at the return statement
    # fp16 scalars are fine: ANE-IO-RANK4 gives them the device shape [1, 1, 1, 1]
    assert "%s" not in notes and "%t" not in notes


@pytest.mark.constraint("ANE-FLOAT-COMPUTE")
def test_integer_arithmetic_is_a_located_error():
    err = reject("""func f(%x: fp16[1, 4, 1, 8]) {
  %i = cast(%x, dtype=int32) : int32[1, 4, 1, 8]
  %j = mul(%i, %i) : int32[1, 4, 1, 8]
  %s = reduce_sum(%j, axes=[1], keep_dims=true) : int32[1, 1, 1, 8]
  %y = cast(%s, dtype=fp16) : fp16[1, 1, 1, 8]
  return %y
}""")
    assert err.constraint == "ANE-FLOAT-COMPUTE" and err.span.location == "test.ir:3:8"
    assert "cast the operands to fp16" in err.hint
    assert any("reduce_sum" in n for n in err.notes)  # every offending node is reported
    # casting through int32 (truncation) and moving integer tensors stay legal
    legalize("""func f(%x: fp16[1, 4, 1, 8]) {
  %i = cast(%x, dtype=int32) : int32[1, 4, 1, 8]
  %t = transpose(%i, perm=[0, 1, 3, 2]) : int32[1, 4, 8, 1]
  %r = reshape(%t, shape=[1, 4, 1, 8]) : int32[1, 4, 1, 8]
  %y = cast(%r, dtype=fp16) : fp16[1, 4, 1, 8]
  return %y
}""")



# ---- weights stored with fewer dims than declared ------------------------------------------

W2D = """
func f(%a: fp16[1, 8, 1, 16], %b: fp16[1, 8, 1, 16], %x: fp16[1, 20, 1, 8]) {
  %c = concat(%a, %b, axis=1) : fp16[1, 16, 1, 16]
  %w = const(weight="w") : fp16[4, 16, 1, 1]
  %y = conv1x1(%c, %w) : fp16[1, 4, 1, 16]
  %v = const(weight="v") : fp16[4, 20, 1, 1]
  %h = conv1x1(%x, %v) : fp16[1, 4, 1, 8]
  return %y, %h
}"""


def test_conv_weights_stored_as_2d_matrices_are_sliced_along_the_input_channels():
    """A [Cout, Cin] checkpoint matrix declared [Cout, Cin, 1, 1] is cut along its second axis:
    both the concat and the over-wide input become partial convs."""
    rng = np.random.default_rng(0)
    w = WeightStore({"w": rng.standard_normal((4, 16)).astype(np.float16),
                     "v": rng.standard_normal((4, 20)).astype(np.float16)})
    before, g, ctx = legalize(W2D, target=TIGHT, weights=w)
    assert rules(ctx) == [("split_concat_into_partial_convs", "ANE-CONCAT")] * 2 + [
        ("split_wide_conv_input", "ANE-CONV-CHANNELS")]
    views = sorted((n.attrs["weight"], tuple(n.attrs["slice"])) for n in g.nodes if n.op == "const")
    assert views == [("v", (1, 0, 7)), ("v", (1, 7, 14)), ("v", (1, 14, 20)),
                     ("w", (1, 0, 8)), ("w", (1, 8, 16))]
    compare(before, g, w, rtol=1e-3, atol=1e-3)


# ---- the rewrite driver ----------------------------------------------------------------------

def test_rules_that_never_settle_are_a_legalize_error(monkeypatch):
    """A rule set that keeps rewriting is stopped after MAX_SWEEPS, and the error names the pass."""
    from anec.diagnostics import PassError
    from anec.passes import legalize as legalize_module
    from anec.passes.legalize import legalize_graph

    def relu_again(node, rw):
        return rw.op("relu", node.operands[0])

    monkeypatch.setattr(legalize_module, "rules_for", lambda target: {"relu": (relu_again,)})
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 8]) {
  %y = relu(%x) : fp16[1, 8, 1, 8]
  return %y
}""")
    with pytest.raises(PassError) as info:
        legalize_graph(g, PassContext(target=M4, weights=None, options={}))
    assert str(info.value.message).startswith("legalize: rewrite rules did not reach a fixpoint after")
