"""Rank-4 program I/O, the whole legalized func: the device shape an input of another rank
takes, the reshape back to its logical shape (a one-element reduce_sum for a scalar) placed
before every other node, the reshapes that cancel, and the outputs returned under their own
name in their device shape (ANE-IO-RANK4)."""

from __future__ import annotations

from anec.ir.printer import print_graph
from anec.weight_store import WeightStore

from .passes_util import compare
from .test_legalize import legalize


def test_inputs_of_other_ranks_read_back_in_their_logical_shape():
    before, g, ctx = legalize("""
func f(%x: fp16[6, 8], %s: fp16[]) {
  %x4 = reshape(%x, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %d = reshape(%x, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %b = mul(%d, %s) : fp16[1, 6, 1, 8]
  %c = relu(%x) : fp16[6, 8]
  return %x4, %b, %c
}""")
    # %d (the device shape of %x, not returned) is %x itself; %x4 is returned, so it stays: the
    # device binds outputs by name, and an input returned as is has none of its own. The two
    # reads-back come first, in input order, under the names <input>_logical.
    assert print_graph(g) == """\
func f(%x: fp16[1, 6, 1, 8], %s: fp16[1, 1, 1, 1]) {
  %x_logical = reshape(%x, shape=[6, 8]) : fp16[6, 8]
  %s_logical = reduce_sum(%s, axes=[0, 1, 2, 3], keep_dims=false) : fp16[]
  %x4 = reshape(%x, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %b = mul(%x, %s_logical) : fp16[1, 6, 1, 8]
  %c_logical = relu(%x_logical) : fp16[6, 8]
  %c = reshape(%c_logical, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  return %x4, %b, %c
}
"""
    assert g.facts.logical_inputs == [{"name": "x", "dtype": "fp16", "shape": [6, 8]},
                                        {"name": "s", "dtype": "fp16", "shape": []}]
    assert [(r["node"], r["location"], r["detail"]) for r in ctx.rewrites] == [
        ("x", "test.ir:2:8", "input %x fp16[6, 8] is fp16[1, 6, 1, 8] on the device (the same elements)"),
        ("s", "test.ir:2:24", "input %s fp16[] is fp16[1, 1, 1, 1] on the device (the same elements)"),
        ("c", "test.ir:7:3", "output %c fp16[6, 8] is fp16[1, 6, 1, 8] on the device (the same elements)"),
    ]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_outputs_of_other_ranks_returned_in_their_device_shape():
    before, g, ctx = legalize("""
func f(%x: fp16[1, 6, 1, 8]) {
  %z = relu(%x) : fp16[1, 6, 1, 8]
  %y = reshape(%z, shape=[6, 8]) : fp16[6, 8]
  %w = exp(%x) : fp16[1, 6, 1, 8]
  %v = reshape(%w, shape=[48]) : fp16[48]
  %u = sigmoid(%x) : fp16[1, 6, 1, 8]
  %t = reshape(%u, shape=[6, 8]) : fp16[6, 8]
  return %z, %y, %v, %t
}""")
    # %t undoes the device shape of %u: %u is returned as %t. %y undoes it too, but %z is
    # returned under its own name, so %y is a reshape of its own. %v reshapes %w directly
    # (a reshape of a reshape is one reshape).
    assert print_graph(g) == """\
func f(%x: fp16[1, 6, 1, 8]) {
  %z = relu(%x) : fp16[1, 6, 1, 8]
  %w = exp(%x) : fp16[1, 6, 1, 8]
  %t = sigmoid(%x) : fp16[1, 6, 1, 8]
  %y = reshape(%z, shape=[1, 6, 1, 8]) : fp16[1, 6, 1, 8]
  %v = reshape(%w, shape=[1, 1, 1, 48]) : fp16[1, 1, 1, 48]
  return %z, %y, %v, %t
}
"""
    assert g.facts.logical_outputs == [
        {"name": n, "axis": None, "pieces": [n], "dtype": "fp16", "shape": s}
        for n, s in (("y", [6, 8]), ("v", [48]), ("t", [6, 8]))]
    assert [(r["node"], r["location"], r["detail"]) for r in ctx.rewrites] == [
        (n, "test.ir:9:3", f"output %{n} fp16{s} is fp16{d} on the device (the same elements)")
        for n, s, d in (("y", [6, 8], [1, 6, 1, 8]), ("v", [48], [1, 1, 1, 48]), ("t", [6, 8], [1, 6, 1, 8]))]
    compare(before, g, WeightStore({}), rtol=0, atol=0)


def test_a_value_returned_twice_keeps_its_shape():
    """An output returned twice (parsed, not verified: the verifier refuses it too) is left as
    written, whatever its rank: emit-mil refuses it, and two device outputs cannot share one
    name."""
    from anec.ir.parser import parse
    from anec.passes import PassContext
    from anec.passes.legalize import legalize_graph
    from anec.targets import get_target

    text = """
func f(%x: fp16[1, 6, 1, 8]) {
  %r = reshape(%x, shape=[6, 8]) : fp16[6, 8]
  %y = exp(%r) : fp16[6, 8]
  return %y, %y
}"""
    g = parse(text, "test.ir").func()
    ctx = PassContext(target=get_target("m4"), weights=None, options={})
    assert legalize_graph(g, ctx, collect=True) == []
    assert print_graph(g) == print_graph(parse(text, "test.ir").func())
    assert ctx.rewrites == [] and g.facts.logical_outputs == []
