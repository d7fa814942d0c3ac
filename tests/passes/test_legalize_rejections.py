"""legalize's rejections word for word: the constraint id, the message naming the value and the
reason, the hint with the fix, and the span of the node at fault (what ``anec check`` prints).
Each case picks the input that decides between the reasons a rule can give."""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import ConstraintError
from anec.ir.builder import Builder
from anec.ir.ops import NotOnAne
from anec.passes import Legalize, PassContext
from anec.passes.legalize import legalize_graph
from anec.passes.legalize_rules import NATIVE_CONCAT_HINT, not_on_ane_rules
from anec.targets import get_target
from anec.weight_store import WeightStore

from .passes_util import compare, parse_func, text_of, weights_for
from .test_legalize import IO, M4, SAME_WEIGHT_TWICE, TIGHT, WEIGHTED, legalize, reject, rules


def stored(**shapes) -> WeightStore:
    """Weights of the given stored shapes (views of them are what the consts declare)."""
    rng = np.random.default_rng(0)
    return WeightStore({k: rng.standard_normal(s).astype(np.float16) for k, s in shapes.items()})


# ---- softmax over a non-power-of-two axis (ANE-SOFTMAX-POW2, on a target that claims it) ------

POW2 = M4.replace(softmax_pow2_only=True)
PAD = "with pad(value=-1e4) so the extra entries get ~0 weight, then slice the result back"


def softmax(shape: str, axis: str) -> str:
    return f"""
func f(%x: fp16[{shape}]) {{
  %p = softmax(%x{axis}) : fp16[{shape}]
  return %p
}}"""


@pytest.mark.parametrize("shape,axis,where,pad", [
    ("1, 4, 1, 48", "", "axis 3 of size 48", "pad axis 3 to 64"),        # no axis: the last one
    ("1, 3, 1, 64", ", axis=1", "axis 1 of size 3", "pad axis 1 to 4"),   # 3 pads to 4, not 8
    ("1, 5, 1, 64", ", axis=-3", "axis 1 of size 5", "pad axis 1 to 8"),  # 5 pads to 8, not 4
])
def test_softmax_over_a_non_power_of_two_axis(shape, axis, where, pad):
    err = reject(softmax(shape, axis), target=POW2)
    assert err.constraint == "ANE-SOFTMAX-POW2"
    assert err.message == f"softmax over {where} (not a power of two) is rejected on m4"
    assert err.hint == f"{pad} {PAD}"
    assert err.span.location == "test.ir:3:8"  # the softmax, not the func


@pytest.mark.parametrize("shape,axis", [
    ("1, 3, 5, 64", ""),          # the default axis is the last one (64), not 1 (3) or 2 (5)
    ("1, 1, 3, 64", ", axis=1"),  # 1 = 2**0
    ("1, 3, 2, 64", ", axis=2"),
])
def test_softmax_over_a_power_of_two_axis_is_kept(shape, axis):
    _, g, ctx = legalize(softmax(shape, axis), target=POW2)
    assert [n.op for n in g.nodes] == ["softmax"] and ctx.rewrites == []


# ---- concat (ANE-CONCAT): only a channel concat feeding conv1x1 weights can be removed ----------

def concat_error(body: str, returns: str, weights=None):
    err = reject(f"""
func f(%a: fp16[1, 8, 1, 16]) {{
{body}
  return {returns}
}}""", weights=weights)
    assert err.constraint == "ANE-CONCAT"
    assert err.span.location == "test.ir:3:8"
    suffix = "; " + NATIVE_CONCAT_HINT  # every concat error names the native reading (ANE-CONCAT is contested)
    assert err.hint.endswith(suffix)
    return err.message, err.hint[:-len(suffix)]


def test_returned_concat():
    assert concat_error("  %y = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]", "%y") == (
        "concat %y cannot be removed: it is returned",
        "return the pieces as separate outputs (a multi-output program) and join them on the host")


def test_concat_along_another_axis():
    assert concat_error("""  %c = concat(%a, %a, axis=3) : fp16[1, 8, 1, 32]
  %w = const(weight="w") : fp16[4, 8, 1, 1]
  %y = conv1x1(%c, %w) : fp16[1, 4, 1, 32]""", "%y") == (
        "concat %c cannot be removed: it joins along axis 3",
        "keep the pieces separate and apply the consumer to each piece, or return them as "
        "separate outputs and join on the host")


def test_channel_concat_feeding_other_ops_names_them_once_each_in_order():
    assert concat_error("""  %c = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]
  %w = const(weight="w") : fp16[4, 16, 1, 1]
  %h = conv1x1(%c, %w) : fp16[1, 4, 1, 16]
  %s = sigmoid(%c) : fp16[1, 16, 1, 16]
  %r = relu(%c) : fp16[1, 16, 1, 16]
  %t = sigmoid(%c) : fp16[1, 16, 1, 16]""", "%h, %s, %r, %t") == (
        "concat %c cannot be removed: it feeds conv1x1, relu, sigmoid (only conv1x1 weights can "
        "absorb a channel concat)",
        "feed the concat only into conv1x1 ops (anec turns those into sums of partial convs), or "
        "return the pieces separately")


def test_channel_concat_feeding_a_conv_whose_weight_cannot_be_sliced():
    # the const already views rows 0..4 of the stored [8, 16] weight: one slice per const
    assert concat_error("""  %c = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]
  %w = const(weight="w", slice=[0, 0, 4]) : fp16[4, 16, 1, 1]
  %y = conv1x1(%c, %w) : fp16[1, 4, 1, 16]""", "%y", weights=stored(w=(8, 16, 1, 1))) == (
        "concat %c cannot be removed: the weight of a conv1x1 it feeds cannot be sliced along "
        "the input channels",
        "give that conv a weight const (const(weight=...), optionally with perm) so anec can "
        "split it into partial convs")



@pytest.mark.parametrize("reads", ["bias", "input and bias"])
def test_channel_concat_a_conv_reads_as_its_bias(reads):
    # the bias is not the conv's input: no partial convs can absorb it, whatever the weight
    x, cin = ("%c", 16) if reads == "input and bias" else ("%p", 8)
    err = reject(f"""
func f(%p: fp16[1, 8, 1, 1], %q: fp16[1, 8, 1, 1]) {{
  %c = concat(%p, %q, axis=1) : fp16[1, 16, 1, 1]
  %w = const(weight="w") : fp16[16, {cin}, 1, 1]
  %y = conv1x1({x}, %w, bias=%c) : fp16[1, 16, 1, 1]
  return %y
}}""")
    assert (err.constraint, err.span.location) == ("ANE-CONCAT", "test.ir:3:8")
    assert (err.message, err.hint) == (
        "concat %c cannot be removed: a conv1x1 reads it as its weight or bias (only a conv's input "
        "can absorb a channel concat)",
        "give the conv its weight and bias as consts, or add the pieces to the conv's output with "
        "separate adds; " + NATIVE_CONCAT_HINT)

# ---- a conv wider than the target's channel limit (ANE-CONV-CHANNELS) ---------------------------

WIDE_HINT = ("return the conv result as its own output (anec then splits it into outputs h__c0, "
             "...), or split the weight into convs of at most 8 output channels")


@pytest.mark.parametrize("body,returns,weights,line", [
    # returned, but read inside the program as well: a chunked output would not feed the sum
    ("""  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 20, 1, 8]
  %s = reduce_sum(%h, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]""", "%h, %s", None,
     "its result is used inside the program"),
    # returned, and read by a unary op whose result is returned too: still read inside
    ("""  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 20, 1, 8]
  %r = relu(%h) : fp16[1, 20, 1, 8]""", "%h, %r", None, "its result is used inside the program"),
    # the weight already views input channels 0..4: it cannot be cut along the output channels
    ("""  %w = const(weight="w", slice=[1, 0, 4]) : fp16[20, 4, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 20, 1, 8]""", "%h", {"w": (20, 8, 1, 1)},
     "its weight or bias cannot be sliced along the output channels"),
    # the bias is row 0 of a stored [2, 20] tensor: its channels cannot be cut
    ("""  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %b = const(weight="b", slice=[0, 0, 1]) : fp16[1, 20, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 20, 1, 8]""", "%h", {"w": (20, 4, 1, 1), "b": (2, 20, 1, 1)},
     "its weight or bias cannot be sliced along the output channels"),
])
def test_wide_conv_that_cannot_be_chunked(body, returns, weights, line):
    text = f"""
func f(%x: fp16[1, 4, 1, 8]) {{
{body}
  return {returns}
}}"""
    err = reject(text, target=TIGHT, weights=stored(**weights) if weights else None)
    assert err.constraint == "ANE-CONV-CHANNELS"
    assert err.message == ("conv1x1 %h has 20 output channels; m4 allows 8, and anec cannot chunk "
                           f"it because {line}")
    assert err.hint == WIDE_HINT
    conv_line = next(i for i, ln in enumerate(text.split("\n"), 1) if "%h = conv1x1" in ln)
    assert err.span.location == f"test.ir:{conv_line}:8"  # the conv


def test_wide_conv_with_a_bias_view_is_chunked_into_views_of_the_view():
    """A bias const that is already a slice of a larger stored tensor is cut again: each chunk
    views its channels at the offset of the first view."""
    w = stored(w=(20, 4, 1, 1), b=(1, 40, 1, 1))
    before, g, ctx = legalize("""
func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="w") : fp16[20, 4, 1, 1]
  %b = const(weight="b", slice=[1, 20, 40]) : fp16[1, 20, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 20, 1, 8]
  return %h
}""", target=TIGHT, weights=w)
    assert g.output_names() == ["h__c0", "h__c1", "h__c2"]
    views = [(n.attrs["weight"], n.attrs["slice"]) for n in g.nodes if n.op == "const"]
    assert views == [("w", [0, 0, 7]), ("b", [1, 20, 27]), ("w", [0, 7, 14]), ("b", [1, 27, 34]),
                     ("w", [0, 14, 20]), ("b", [1, 34, 40])]
    assert rules(ctx)[0] == ("chunk_wide_conv_output", "ANE-CONV-CHANNELS")
    compare(before, g, w, rtol=1e-3, atol=1e-3)



def test_wide_conv_input_whose_weight_cannot_be_sliced():
    err = reject("""
func f(%x: fp16[1, 20, 1, 8]) {
  %w = const(weight="w", slice=[0, 0, 4]) : fp16[4, 20, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 4, 1, 8]
  return %h
}""", target=TIGHT, weights=stored(w=(8, 20, 1, 1)))
    assert (err.constraint, err.span.location) == ("ANE-CONV-CHANNELS", "test.ir:4:8")
    assert err.message == ("conv1x1 %h has 20 input channels; m4 allows 8 and its weight cannot be "
                           "sliced")
    assert err.hint == "use a weight const (optionally with perm) so anec can split the input channels"


# ---- program I/O, integer compute, weights -----------------------------------------------------

def test_fp32_io_without_host_casts_lists_every_input_and_output():
    err = reject(IO, target=get_target("m1"))
    assert (err.constraint, err.span.location) == ("ANE-FP32-IO", "test.ir:2:8")
    assert err.message == "input %x is fp32; m1 rejects fp32 program I/O"
    assert err.hint == ("declare %x as fp16 and convert on the host, or compile with --host-casts "
                        "to let anec do that")
    assert err.notes == ["test.ir:6:3: [ANE-FP32-IO] output %y is fp32; m1 rejects fp32 program I/O"]


def test_integer_arithmetic():
    err = reject("""func f(%x: fp16[1, 4, 1, 8]) {
  %i = cast(%x, dtype=int32) : int32[1, 4, 1, 8]
  %j = mul(%i, %i) : int32[1, 4, 1, 8]
  %y = cast(%j, dtype=fp16) : fp16[1, 4, 1, 8]
  return %y
}""")
    assert (err.constraint, err.span.location) == ("ANE-FLOAT-COMPUTE", "test.ir:3:8")
    assert err.message == ("%j = mul computes on int32 (int32[1, 4, 1, 8]); the ANE computes on "
                           "fp16/fp32 tensors")
    assert err.hint == ("cast the operands to fp16 first, e.g. cast(%i, dtype=fp16), and back to "
                        "int32 after if the program needs integers")


def test_integer_arithmetic_after_a_const():
    """The check goes past the consts (which compute nothing) to the integer arithmetic after them."""
    err = reject("""func f(%x: fp16[1, 4, 1, 8]) {
  %k = const(value=2.0) : fp16[]
  %h = mul(%x, %k) : fp16[1, 4, 1, 8]
  %i = cast(%h, dtype=int32) : int32[1, 4, 1, 8]
  %j = add(%i, %i) : int32[1, 4, 1, 8]
  %y = cast(%j, dtype=fp16) : fp16[1, 4, 1, 8]
  return %y
}""")
    assert (err.constraint, err.span.location) == ("ANE-FLOAT-COMPUTE", "test.ir:5:8")
    assert err.message == "%j = add computes on int32 (int32[1, 4, 1, 8]); the ANE computes on fp16/fp32 tensors"
    assert err.notes == []


def test_integer_reduce_mean():
    err = reject("""
func f(%x: fp16[1, 6, 1, 4]) {
  %n = cast(%x, dtype=int32) : int32[1, 6, 1, 4]
  %m = reduce_mean(%n, axes=[1]) : int32[1, 1, 4]
  %y = cast(%m, dtype=fp16) : fp16[1, 1, 4]
  return %y
}""")
    assert (err.constraint, err.span.location) == ("ANE-REDUCE-MEAN", "test.ir:4:8")
    assert err.message == "reduce_mean of int32 %n cannot be lowered to reduce_sum exactly on this target"
    assert err.hint == "cast the operand to fp16 first"


NAN_HINT = "fix the checkpoint (a NaN/Inf weight poisons every output it reaches)"


@pytest.mark.parametrize("values,message,hint", [
    ([np.nan, np.nan, 1.0], "weight 'layer.w' contains 2 NaN values", NAN_HINT),
    ([np.inf, -np.inf, 1.0], "weight 'layer.w' contains 2 Inf values", NAN_HINT),
    ([np.nan, -np.inf, 7e4], "weight 'layer.w' contains 1 NaN, 1 Inf values", NAN_HINT),
    ([1.0, -np.inf, 7e4], "weight 'layer.w' contains 1 Inf value", NAN_HINT),
    ([7e4, -1e5, 65504.0], "weight 'layer.w' has 2 values beyond the fp16 range +-65504 (largest "
     "|v| = 100000); on the ANE they become inf",
     "rescale the weight (and undo the scale after the op), or use -1e4 instead of huge "
     "magnitudes for masks"),
])
def test_weights_out_of_fp16_range(values, message, hint):
    w = np.ones((4, 4, 1, 1), np.float32)
    w.flat[:3] = values
    err = reject(WEIGHTED, weights=WeightStore({"layer.w": w}))
    assert (err.constraint, err.span.location) == ("ANE-FP16-RANGE", "test.ir:3:8")
    assert (err.message, err.hint) == (message, hint)



def test_a_stored_integer_tensor_is_left_to_the_weight_check():
    # check_weights refuses an int tensor behind a float const (compile, anec check --weights);
    # legalize reads float values only and does not call 1e5 "beyond fp16" a second time
    from .test_legalize import legalize

    ints = np.full((4, 4, 1, 1), 100000, np.int32)
    _, g, ctx = legalize(WEIGHTED, weights=WeightStore({"layer.w": ints}))
    assert [n.op for n in g.nodes] == ["const", "conv1x1"] and ctx.rewrites == []

def test_packed_weights_on_a_one_file_per_weight_target():
    err = reject("""
func f(%x: fp16[1, 4, 1, 8]) {
  %w1 = const(weight="w1") : fp16[4, 4, 1, 1]
  %w2 = const(weight="w2") : fp16[4, 4, 1, 1]
  %w3 = const(weight="w1") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %w1) : fp16[1, 4, 1, 8]
  %b = conv1x1(%a, %w2) : fp16[1, 4, 1, 8]
  %c = conv1x1(%b, %w3) : fp16[1, 4, 1, 8]
  return %c
}""", target=get_target("m1"), pack_weights=True)
    assert (err.constraint, err.span.location) == ("ANE-ONE-FILE-PER-WEIGHT", "test.ir:2:6")  # the func
    assert err.message == "packed weights (one BLOBFILE holding 2 tensors) are rejected on m1"  # w1 twice: one
    assert err.hint == "compile without --pack-weights: anec then writes one file per weight"


def test_one_weight_tensor_packed_is_one_file_per_weight():
    """A pack of one tensor is a file per weight: m1 takes it (%w2 is %w1's view again)."""
    _, g, ctx = legalize(SAME_WEIGHT_TWICE, target=get_target("m1"), pack_weights=True,
                         weights=stored(w=(4, 4, 1, 1)))
    assert [n.op for n in g.nodes] == ["const", "conv1x1", "conv1x1"]


def test_an_integer_output_computed_on_integers_is_one_error():
    """The output's error names the node that computes it; that node gets no second one."""
    err = reject("""
func f(%x: fp16[1, 4, 1, 8]) {
  %i = cast(%x, dtype=int32) : int32[1, 4, 1, 8]
  %j = mul(%i, %i) : int32[1, 4, 1, 8]
  return %j
}""")
    assert (err.constraint, err.span.location) == ("ANE-IO-TENSORS", "test.ir:5:3")
    assert err.message == ("output %j is int32 (int32[1, 4, 1, 8]); program inputs and outputs "
                           "must be fp16 or fp32 tensors")
    assert err.hint == "cast it before returning: cast(%j, dtype=fp16)"
    assert err.notes == []


def test_a_built_graph_without_spans_lists_the_other_errors_without_a_location():
    b = Builder("f")
    x = b.input("x", "fp16", [1, 8, 1, 16])
    c = b.concat(x, x, axis=3, name="c")
    d = b.concat(x, x, axis=2, name="d")
    b.ret(b.reduce_sum(c, axes=[3], name="e"), b.reduce_sum(d, axes=[2], name="g"))
    with pytest.raises(ConstraintError) as info:
        Legalize().run(b.graph, PassContext(target=M4, weights=WeightStore({})))
    err = info.value
    assert err.span is None and err.message == "concat %c cannot be removed: it joins along axis 3"
    assert err.notes == ["[ANE-CONCAT] concat %d cannot be removed: it joins along axis 2"]


def test_an_op_table_row_naming_a_missing_rule_is_a_clear_error():
    row = NotOnAne("ANE-NEG", ("neg_to_mul", "neg_to_sub"), "the ANE has no neg op",
                   "multiply by -1 instead", "mul(x, -1)")
    with pytest.raises(KeyError) as info:
        not_on_ane_rules(row)
    assert info.value.args[0] == ("the op table names legalize rule 'neg_to_sub' (ANE-NEG), which "
                                  "anec/passes/legalize_rules.py does not define")


def test_every_weight_key_is_checked_once_in_node_order():
    """An in-range, an integer, a one-element, a missing and a repeated key do not stop the check: each
    bad key is one error, at its first const, in node order."""
    text = """
func f(%x: fp16[1, 4, 1, 8]) {
  %ok = const(weight="ok") : fp16[4, 4, 1, 1]
  %a = conv1x1(%x, %ok) : fp16[1, 4, 1, 8]
  %gone = const(weight="gone") : fp16[1, 4, 1, 1]
  %b = add(%a, %gone) : fp16[1, 4, 1, 8]
  %idx = const(weight="idx") : fp16[1, 4, 1, 1]
  %one = const(weight="one") : fp16[1, 1, 1, 1]
  %bi = add(%b, %idx) : fp16[1, 4, 1, 8]
  %c = mul(%bi, %one) : fp16[1, 4, 1, 8]
  %big = const(weight="big") : fp16[4, 4, 1, 1]
  %d = conv1x1(%c, %big) : fp16[1, 4, 1, 8]
  %big2 = const(weight="big", perm=[1, 0, 2, 3]) : fp16[4, 4, 1, 1]
  %e = conv1x1(%d, %big2) : fp16[1, 4, 1, 8]
  return %e
}"""
    big = np.ones((4, 4, 1, 1), np.float32)
    big[2, 3] = -7e4
    store = WeightStore({"ok": np.full((4, 4, 1, 1), 65504.0, np.float32), "big": big,
                         "idx": np.arange(4, dtype=np.int32).reshape(1, 4, 1, 1),
                         "one": np.full((1, 1, 1, 1), np.nan, np.float32)})
    err = reject(text, weights=store)
    assert (err.constraint, err.span.location, err.message) == (
        "ANE-FP16-RANGE", "test.ir:8:10", "weight 'one' contains 1 NaN value")
    assert err.notes == ["test.ir:11:10: [ANE-FP16-RANGE] weight 'big' has 1 value beyond the fp16 "
                         "range +-65504 (largest |v| = 70000); on the ANE it becomes inf"]


def test_integer_io_is_reported_before_fp32_io_is_considered():
    """Once an input or output is not a float tensor, the fp32 I/O check does not add errors
    about a program that must change anyway."""
    err = reject("""
func f(%n: int32[1, 4, 1, 2], %x: fp32[1, 4, 1, 2]) {
  %y = relu(%x) : fp32[1, 4, 1, 2]
  return %y
}""", target=get_target("m1"))
    assert (err.constraint, err.span.location) == ("ANE-IO-TENSORS", "test.ir:2:8")
    assert err.notes == []


def test_a_returned_concat_is_not_split_for_the_convs_it_feeds():
    """The concat must stay to be returned: its convs keep reading it, and nothing is recorded as removed."""
    g = parse_func("""
func f(%a: fp16[1, 8, 1, 16]) {
  %y = concat(%a, %a, axis=1) : fp16[1, 16, 1, 16]
  %w = const(weight="w") : fp16[4, 16, 1, 1]
  %c = conv1x1(%y, %w) : fp16[1, 4, 1, 16]
  return %y, %c
}""")
    ctx = PassContext(target=M4, weights=stored(w=(4, 16, 1, 1)), options={})
    [(node, err)] = legalize_graph(g, ctx, collect=True)
    assert (err.constraint, err.span.location) == ("ANE-CONCAT", "test.ir:3:8")
    assert err.message == "concat %y cannot be removed: it is returned"
    assert ctx.rewrites == []
    assert [n.op for n in g.nodes] == ["concat", "const", "conv1x1"]


def test_a_concat_a_conv_reads_as_input_and_bias_is_not_cut_into_partial_convs():
    """Only the conv's bias is split off (into conv + add); the concat stays whole and is the
    one rejection: no partial convs are made for a conv that also reads the concat as bias."""
    g = parse_func("""
func f(%p: fp16[1, 8, 1, 1], %q: fp16[1, 8, 1, 1]) {
  %c = concat(%p, %q, axis=1) : fp16[1, 16, 1, 1]
  %w = const(weight="w") : fp16[16, 16, 1, 1]
  %y = conv1x1(%c, %w, bias=%c) : fp16[1, 16, 1, 1]
  return %y
}""")
    ctx = PassContext(target=get_target("m4"), weights=weights_for(g), options={})
    errors = legalize_graph(g, ctx, collect=True)
    assert [(n.op, e.constraint) for n, e in errors] == [("concat", "ANE-CONCAT")]
    assert [r["rule"] for r in ctx.rewrites] == ["split_conv_bias"]
    assert text_of(g) == """\
func f(%p: fp16[1, 8, 1, 1], %q: fp16[1, 8, 1, 1]) {
  %c = concat(%p, %q, axis=1) : fp16[1, 16, 1, 1]
  %w = const(weight="w") : fp16[16, 16, 1, 1]
  %y_conv = conv1x1(%c, %w) : fp16[1, 16, 1, 1]
  %y = add(%y_conv, %c) : fp16[1, 16, 1, 1]
  return %y
}
"""
