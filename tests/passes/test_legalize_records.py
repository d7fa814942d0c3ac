"""What legalize records for each rewrite, word for word: ``ctx.rewrites`` is what ``anec
check`` and ``--report`` show (rule, constraint id, node, location, detail), so the numbers
in each detail (element counts, channel limits, weight layouts, the pieces an output became)
are checked against the program."""

from __future__ import annotations

import pytest

from anec.diagnostics import ConstraintError
from anec.passes import Legalize, PassContext, Partition
from anec.targets import get_target

from .passes_util import parse_func, weights_for
from .test_legalize import IO, M4, TIGHT, legalize, many_weights


def records(text: str, **kw) -> list[tuple[str, str, str, str, str]]:
    _, _, ctx = legalize(text, **kw)
    return [(r["rule"], r["constraint"], r["node"], r["location"], r["detail"]) for r in ctx.rewrites]


def test_elementwise_rewrites_and_reduce_mean():
    assert records("""
func f(%x: fp16[1, 8, 1, 16], %v: fp16[1, 8, 1, 16]) {
  %g = gelu(%x) : fp16[1, 8, 1, 16]
  %t = gelu(%v, mode="tanh") : fp16[1, 8, 1, 16]
  %r = rsqrt(%t) : fp16[1, 8, 1, 16]
  %n = neg(%r) : fp16[1, 8, 1, 16]
  %m = reduce_mean(%n, axes=[1, 3], keep_dims=true) : fp16[1, 1, 1, 1]
  return %g, %m
}""") == [
        ("expand_gelu_tanh", "ANE-GELU", "g", "test.ir:3:8",
         "gelu(mode=exact) -> tanh approximation (approximation: max abs error 4.74e-04 vs erf GELU)"),
        ("expand_gelu_tanh", "ANE-GELU", "t", "test.ir:4:8", "gelu(mode=tanh) -> its tanh formula (exact)"),
        ("rsqrt_to_pow", "ANE-RSQRT", "r", "test.ir:5:8", "rsqrt(x) -> pow(x, -0.5)"),
        ("neg_to_mul", "ANE-NEG", "n", "test.ir:6:8", "neg(x) -> mul(x, -1)"),
        ("lower_reduce_mean", "ANE-REDUCE-MEAN", "m", "test.ir:7:8",
         "reduce_mean over 128 elements -> reduce_sum(x * 1/128)"),  # 8 channels x 16
    ]


def test_conv_bias_dynamic_weight_and_split():
    assert records("""
func f(%x: fp16[1, 4, 1, 8], %u: fp16[1, 12, 1, 8], %k: fp16[6, 4, 1, 1]) {
  %w = const(weight="w") : fp16[6, 4, 1, 1]
  %b = const(weight="b") : fp16[1, 6, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 6, 1, 8]
  %d = conv1x1(%x, %k) : fp16[1, 6, 1, 8]
  %p, %q, %z = split(%u, axis=1, sizes=[4, 4, 4]) : fp16[1, 4, 1, 8], fp16[1, 4, 1, 8], fp16[1, 4, 1, 8]
  %s = add(%p, %z) : fp16[1, 4, 1, 8]
  return %h, %d, %s
}""") == [
        ("split_conv_bias", "ANE-CONV-BIAS", "h", "test.ir:5:8", "conv1x1 bias=%b -> conv1x1 + add"),
        ("conv_dynamic_weight_to_matmul", "ANE-CONV-CONST-WEIGHT", "d", "test.ir:6:8",
         "conv1x1 with the non-constant weight %k -> matmul (weight [6, 4] as the transposed right operand)"),
        # %q is read by nobody: two slices, not three
        ("split_to_slices", "ANE-SPLIT", "p", "test.ir:7:16", "split into 3 along axis 1 -> 2 slices (%p, %z)"),
    ]


def test_matmul_with_a_constant_operand_says_which_side_and_layout():
    # w [K, N] on the right is transposed to [N, K]; u [N, K] with transpose_y and v [M, K] on
    # the left are already in the conv's [out, in] order
    assert records("""
func f(%x: fp16[1, 1, 8, 64], %y: fp16[1, 1, 32, 8]) {
  %w = const(weight="w") : fp16[64, 32]
  %a = matmul(%x, %w) : fp16[1, 1, 8, 32]
  %v = const(weight="v") : fp16[16, 32]
  %b = matmul(%v, %y) : fp16[1, 1, 16, 8]
  %u = const(weight="u") : fp16[32, 64]
  %c = matmul(%x, %u, transpose_y=true) : fp16[1, 1, 8, 32]
  return %a, %b, %c
}""") == [
        ("matmul_const_to_conv", "ANE-CONV-FASTER", "a", "test.ir:4:8",
         "matmul with constant right operand 'w' -> conv1x1 (weight [32, 64, 1, 1] transposed via perm)"),
        ("matmul_const_to_conv", "ANE-CONV-FASTER", "b", "test.ir:6:8",
         "matmul with constant left operand 'v' -> conv1x1 (weight [16, 32, 1, 1] as stored)"),
        ("matmul_const_to_conv", "ANE-CONV-FASTER", "c", "test.ir:8:8",
         "matmul with constant right operand 'u' -> conv1x1 (weight [32, 64, 1, 1] as stored)"),
    ]



def test_matmul_within_the_channel_limit_becomes_a_conv():
    # the limit holds for both sides of the weight: 32 x 32 is within 32 (a conv), 32 in x 33 out
    # and 33 in x 32 out are not (matmuls as written)
    assert records("""
func f(%x: fp16[1, 1, 8, 32], %z: fp16[1, 1, 8, 33]) {
  %w = const(weight="w") : fp16[32, 32]
  %a = matmul(%x, %w) : fp16[1, 1, 8, 32]
  %v = const(weight="v") : fp16[32, 33]
  %b = matmul(%x, %v) : fp16[1, 1, 8, 33]
  %u = const(weight="u") : fp16[33, 32]
  %c = matmul(%z, %u) : fp16[1, 1, 8, 32]
  return %a, %b, %c
}""", target=M4.replace(max_conv_out_channels=32)) == [
        ("matmul_const_to_conv", "ANE-CONV-FASTER", "a", "test.ir:4:8",
         "matmul with constant right operand 'w' -> conv1x1 (weight [32, 32, 1, 1] transposed via perm)"),
    ]

def test_concat_and_channel_limits():
    assert records("""
func f(%a: fp16[1, 8, 1, 16], %b: fp16[1, 4, 1, 16], %x: fp16[1, 20, 1, 8]) {
  %c = concat(%a, %b, axis=1) : fp16[1, 12, 1, 16]
  %w1 = const(weight="w1") : fp16[6, 12, 1, 1]
  %w2 = const(weight="w2") : fp16[3, 12, 1, 1]
  %y1 = conv1x1(%c, %w1) : fp16[1, 6, 1, 16]
  %y2 = conv1x1(%c, %w2) : fp16[1, 3, 1, 16]
  %w = const(weight="w") : fp16[4, 20, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 4, 1, 8]
  %v = const(weight="v") : fp16[20, 4, 1, 1]
  %o = conv1x1(%h, %v) : fp16[1, 20, 1, 8]
  %e = exp(%o) : fp16[1, 20, 1, 8]
  return %y1, %y2, %e
}""", target=TIGHT) == [
        ("split_concat_into_partial_convs", "ANE-CONCAT", "c", "test.ir:3:8",
         "channel concat of 2 tensors feeding %y1, %y2 removed: each conv reads the pieces directly"),
        ("split_concat_into_partial_convs", "ANE-CONCAT", "y1", "test.ir:6:9",
         "conv1x1 over concat %c -> sum of 2 partial convs over slices of weight 'w1'"),
        ("split_concat_into_partial_convs", "ANE-CONCAT", "y2", "test.ir:7:9",
         "conv1x1 over concat %c -> sum of 2 partial convs over slices of weight 'w2'"),
        ("split_wide_conv_input", "ANE-CONV-CHANNELS", "h", "test.ir:9:8",
         "conv1x1 with 20 input channels (limit 8) -> sum of 3 convs over input channel slices"),
        # the exp after the conv is chunked with it: the pieces are the exp's
        ("chunk_wide_conv_output", "ANE-CONV-CHANNELS", "o", "test.ir:11:8",
         "conv1x1 with 20 output channels (limit 8) -> 3 chunked convs; output %e returned as "
         "%e__c0, %e__c1, %e__c2 (axis 1)"),
    ]


def test_io_shapes_and_host_casts():
    assert records("""
func f(%t: fp16[8, 64], %s: fp16[]) {
  %e = exp(%t) : fp16[8, 64]
  %m = mul(%e, %s) : fp16[8, 64]
  return %m
}""") == [
        ("reshape_io_to_rank4", "ANE-IO-RANK4", "t", "test.ir:2:8",
         "input %t fp16[8, 64] is fp16[1, 8, 1, 64] on the device (the same elements)"),
        ("reshape_io_to_rank4", "ANE-IO-RANK4", "s", "test.ir:2:25",
         "input %s fp16[] is fp16[1, 1, 1, 1] on the device (the same elements)"),
        ("reshape_io_to_rank4", "ANE-IO-RANK4", "m", "test.ir:5:3",  # the return statement
         "output %m fp16[8, 64] is fp16[1, 8, 1, 64] on the device (the same elements)"),
    ]
    assert records(IO, target=get_target("m1"), host_casts=True) == [
        ("use_host_casts", "ANE-FP32-IO", "x", "test.ir:2:8",
         "input %x is fp16 on the device; the host converts fp32 <-> fp16"),
        ("use_host_casts", "ANE-FP32-IO", "y", "test.ir:6:3",
         "output %y is fp16 on the device; the host converts fp32 <-> fp16"),
    ]


def test_a_cut_into_programs_names_the_func_and_the_bytes_between_them():
    # 17 weights on m4 (16 per program): one cut, one fp16[1, 4, 1, 8] activation (64 bytes) crosses
    assert records(many_weights(17, scalar=False)) == [
        ("partition", "ANE-BLOB-BUDGET", "f", "test.ir:1:6",
         "func 'f' is cut into 2 programs (64 bytes cross stage boundaries)"),
    ]


def test_the_plan_in_the_facts_is_the_last_run_s():
    """Partitioning the result again (another target) replaces the plan: none when the func now
    fits one program, none when no plan can cut it."""
    _, g, ctx = legalize(many_weights(17, scalar=False))
    assert len(g.facts.partition.stages) == 2
    Partition().run(g, PassContext(target=ctx.target.replace(max_blob_tensors=32), weights=ctx.weights))
    assert g.facts.partition is None
    _, g, ctx = legalize(many_weights(17, scalar=False))
    with pytest.raises(ConstraintError, match="BLOBFILE"):
        Partition().run(g, PassContext(target=ctx.target.replace(max_blob_tensors=0), weights=ctx.weights))
    assert g.facts.partition is None


def test_legalize_alone_plans_nothing():
    """The plan is the partition pass's: legalize leaves a func over the budget uncut."""
    g = parse_func(many_weights(17, scalar=False))
    ctx = PassContext(target=M4, weights=weights_for(g))
    Legalize().run(g, ctx)
    assert g.facts.partition is None and not [r for r in ctx.rewrites if r["rule"] == "partition"]
