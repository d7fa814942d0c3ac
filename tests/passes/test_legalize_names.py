"""The values a legalize rewrite adds are named after the value they replace plus a fixed
suffix (``%d_mm``, ``%h_in``, ``%h_part``, ``%h_sum``), and the last one takes the replaced
name: what ``--print-ir-after legalize`` shows and the MIL names the device reports."""

from __future__ import annotations

from .passes_util import compare, text_of
from .test_legalize import TIGHT, legalize, rules


def test_dynamic_weight_conv_and_wide_input_conv_in_full():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 4, 1, 8], %k: fp16[6, 4, 1, 1], %u: fp16[1, 20, 1, 8]) {
  %b = const(weight="b") : fp16[1, 6, 1, 1]
  %d = conv1x1(%x, %k, bias=%b) : fp16[1, 6, 1, 8]
  %w = const(weight="w") : fp16[4, 20, 1, 1]
  %h = conv1x1(%u, %w) : fp16[1, 4, 1, 8]
  return %d, %h
}""", target=TIGHT)
    assert text_of(g) == """\
func f(%x: fp16[1, 4, 1, 8], %k: fp16[6, 4, 1, 1], %u: fp16[1, 20, 1, 8]) {
  %b = const(weight="b") : fp16[1, 6, 1, 1]
  %d_t = transpose(%x, perm=[0, 2, 3, 1]) : fp16[1, 1, 8, 4]
  %d_r = reshape(%k, shape=[1, 1, 6, 4]) : fp16[1, 1, 6, 4]
  %d_mm = matmul(%d_t, %d_r, transpose_x=false, transpose_y=true) : fp16[1, 1, 8, 6]
  %d_t_0 = transpose(%d_mm, perm=[0, 3, 1, 2]) : fp16[1, 6, 1, 8]
  %d = add(%d_t_0, %b) : fp16[1, 6, 1, 8]
  %h_in = slice(%u, begin=[0, 0, 0, 0], end=[1, 7, 1, 8]) : fp16[1, 7, 1, 8]
  %h_in_1 = slice(%u, begin=[0, 7, 0, 0], end=[1, 14, 1, 8]) : fp16[1, 7, 1, 8]
  %h_in_2 = slice(%u, begin=[0, 14, 0, 0], end=[1, 20, 1, 8]) : fp16[1, 6, 1, 8]
  %h_s = const(weight="w", slice=[1, 0, 7]) : fp16[4, 7, 1, 1]
  %h_part = conv1x1(%h_in, %h_s) : fp16[1, 4, 1, 8]
  %h_s_3 = const(weight="w", slice=[1, 7, 14]) : fp16[4, 7, 1, 1]
  %h_part_4 = conv1x1(%h_in_1, %h_s_3) : fp16[1, 4, 1, 8]
  %h_s_5 = const(weight="w", slice=[1, 14, 20]) : fp16[4, 6, 1, 1]
  %h_part_6 = conv1x1(%h_in_2, %h_s_5) : fp16[1, 4, 1, 8]
  %h_sum = add(%h_part, %h_part_4) : fp16[1, 4, 1, 8]
  %h = add(%h_sum, %h_part_6) : fp16[1, 4, 1, 8]
  return %d, %h
}
"""
    compare(before, g, ctx.weights, rtol=1e-3, atol=1e-3)


def test_a_conv_with_an_inline_literal_weight_stays_a_conv():
    """Only a computed weight or a func input makes a conv a matmul: a literal is constant."""
    text = """
func f(%x: fp16[1, 4, 1, 8]) {
  %k = const(value=0.5) : fp16[6, 4, 1, 1]
  %d = conv1x1(%x, %k) : fp16[1, 6, 1, 8]
  return %d
}"""
    before, g, ctx = legalize(text)
    assert [n.op for n in g.nodes] == ["const", "conv1x1"] and rules(ctx) == []


def test_invented_names_skip_the_users_names_in_a_fixed_order():
    """The user already wrote %y_f16/%y_f32 (host casts) and %z_device/%z_logical (rank-4
    output): the invented names take the next free suffixes, one counter for the func, so
    the legalized text is the same on every run."""
    from anec.targets import get_target

    _, g, _ = legalize("""
func f(%x: fp16[1, 6, 1, 8]) {
  %y_f16 = relu(%x) : fp16[1, 6, 1, 8]
  %y_f32 = sigmoid(%x) : fp16[1, 6, 1, 8]
  %s = add(%y_f16, %y_f32) : fp16[1, 6, 1, 8]
  %c = cast(%s, dtype=fp32) : fp32[1, 6, 1, 8]
  %y = exp(%c) : fp32[1, 6, 1, 8]
  %z_device = relu(%s) : fp16[1, 6, 1, 8]
  %z_logical = sigmoid(%s) : fp16[1, 6, 1, 8]
  %t = add(%z_device, %z_logical) : fp16[1, 6, 1, 8]
  %r = reshape(%t, shape=[6, 8]) : fp16[6, 8]
  %z = exp(%r) : fp16[6, 8]
  return %y, %z
}""", target=get_target("m1"), host_casts=True)
    assert text_of(g) == """\
func f(%x: fp16[1, 6, 1, 8]) {
  %y_f16 = relu(%x) : fp16[1, 6, 1, 8]
  %y_f32 = sigmoid(%x) : fp16[1, 6, 1, 8]
  %s = add(%y_f16, %y_f32) : fp16[1, 6, 1, 8]
  %c = cast(%s, dtype=fp32) : fp32[1, 6, 1, 8]
  %y_f32_1 = exp(%c) : fp32[1, 6, 1, 8]
  %z_device = relu(%s) : fp16[1, 6, 1, 8]
  %z_logical = sigmoid(%s) : fp16[1, 6, 1, 8]
  %t = add(%z_device, %z_logical) : fp16[1, 6, 1, 8]
  %r = reshape(%t, shape=[6, 8]) : fp16[6, 8]
  %z_logical_3 = exp(%r) : fp16[6, 8]
  %y = cast(%y_f32_1, dtype=fp16) : fp16[1, 6, 1, 8]
  %z = reshape(%z_logical_3, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  return %y, %z
}
"""


def test_an_input_read_back_takes_the_name_of_the_reshape_it_replaces():
    """%x_logical (the user's reshape of %x to its device shape) is %x itself once %x is rank 4:
    it is gone before the read-back is made, so the read-back is %x_logical, no suffix."""
    _, g, _ = legalize("""
func f(%x: fp16[6, 8]) {
  %x_logical = reshape(%x, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %e = exp(%x_logical) : fp16[1, 6, 1, 8]
  %c = relu(%x) : fp16[6, 8]
  %y = reshape(%c, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  return %e, %y
}""")
    assert text_of(g) == """\
func f(%x: fp16[1, 6, 1, 8]) {
  %x_logical = reshape(%x, shape=[6, 8]) : fp16[6, 8]
  %e = exp(%x) : fp16[1, 6, 1, 8]
  %c = relu(%x_logical) : fp16[6, 8]
  %y = reshape(%c, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  return %e, %y
}
"""
