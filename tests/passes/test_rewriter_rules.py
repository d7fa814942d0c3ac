"""The rewrite driver and the Rewriter, on small hand-written rules: how new nodes are named and
placed, how many rewrites the driver reports, what a rewrite record holds, which nodes die, and the
error for rules that never settle."""

from __future__ import annotations

import pytest

from anec.diagnostics import PassError
from anec.ir.types import DType, TensorType
from anec.passes import PassContext
from anec.passes.rewrite import HANDLED, MAX_SWEEPS, Rewriter, erase_if_dead, rewrite_greedily

from .passes_util import parse_func, text_of

NEGS = """
func f(%x: fp16[1, 4, 1, 8]) {
  %a = neg(%x) : fp16[1, 4, 1, 8]
  %b = neg(%a) : fp16[1, 4, 1, 8]
  %c = relu(%b) : fp16[1, 4, 1, 8]
  %d = neg(%c) : fp16[1, 4, 1, 8]
  return %d
}"""

TWO = """
func f(%x: fp16[1, 4, 1, 8]) {
  %a = relu(%x) : fp16[1, 4, 1, 8]
  %y = tanh(%a) : fp16[1, 4, 1, 8]
  return %y
}"""


def neg_to_mul(node, rw):
    """neg(x) -> mul(x, -1), recorded like a legalize rule."""
    rw.record("ANE-NEG", "multiply by -1")
    return rw.op("mul", node.operands[0], rw.scalar(-1.0, node.results[0].type.dtype))


def _rewriter(g, name="test"):
    return Rewriter(g, PassContext.default(), name)


def test_the_driver_returns_the_number_of_rewrites_and_keeps_the_names():
    g = parse_func(NEGS)
    rw = _rewriter(g)
    seen = []
    rw.on_rewrite = lambda node, entry: seen.append((node.op, node.results[0].name, entry["node"]))
    assert rewrite_greedily(g, {"neg": (neg_to_mul,)}, rw) == 3
    # each scalar is named after the node it was built for; each mul takes the name of the neg it replaces
    assert text_of(g) == """func f(%x: fp16[1, 4, 1, 8]) {
  %a_c = const(value=-1.0) : fp16[]
  %a = mul(%x, %a_c) : fp16[1, 4, 1, 8]
  %b_c = const(value=-1.0) : fp16[]
  %b = mul(%a, %b_c) : fp16[1, 4, 1, 8]
  %c = relu(%b) : fp16[1, 4, 1, 8]
  %d_c = const(value=-1.0) : fp16[]
  %d = mul(%c, %d_c) : fp16[1, 4, 1, 8]
  return %d
}
"""
    assert seen == [("neg", "a", "a"), ("neg", "b", "b"), ("neg", "d", "d")]
    assert rw.ctx.rewrites == [
        {"rule": "neg_to_mul", "constraint": "ANE-NEG", "node": n, "location": f"test.ir:{line}:8",
         "detail": "multiply by -1", "func": "f"}
        for n, line in (("a", 3), ("b", 4), ("d", 6))]
    assert rewrite_greedily(g, {"neg": (neg_to_mul,)}, rw) == 0  # nothing left to match


def test_rules_that_never_settle_are_an_error_naming_the_pass_and_the_func():
    g = parse_func(TWO)

    def flip(node, rw):  # relu(x) -> relu(x): always matches
        return rw.op("relu", node.operands[0])

    with pytest.raises(PassError) as info:
        rewrite_greedily(g, {"relu": (flip,)}, _rewriter(g, "my-pass"))
    assert info.value.message == (f"my-pass: rewrite rules did not reach a fixpoint after {MAX_SWEEPS} "
                                  "sweeps over func 'f'")


@pytest.mark.parametrize("build, name, text", [
    (lambda rw, x: rw.scalar(2.0, DType.fp16), "y_c", "const(value=2.0) : fp16[]"),
    (lambda rw, x: rw.scalar(2.0, DType.fp16, "two"), "y_two", "const(value=2.0) : fp16[]"),
    (lambda rw, x: rw.const_value(0.5, TensorType(DType.fp32, (1, 4, 1, 1))), "y_c",
     "const(value=0.5) : fp32[1, 4, 1, 1]"),
    (lambda rw, x: rw.const_weight({"weight": "w"}, TensorType(DType.fp16, (4, 4, 1, 1))), "y_w",
     'const(weight="w") : fp16[4, 4, 1, 1]'),
    (lambda rw, x: rw.op("sigmoid", x), "y_sigmoid", "sigmoid(%a) : fp16[1, 4, 1, 8]"),
    (lambda rw, x: rw.op("sigmoid", x, suffix="s"), "y_s", "sigmoid(%a) : fp16[1, 4, 1, 8]"),
    (lambda rw, x: rw.op("sigmoid", x, name="gate"), "gate", "sigmoid(%a) : fp16[1, 4, 1, 8]"),
])
def test_a_new_node_is_named_after_the_anchor_and_placed_before_it_with_its_span(build, name, text):
    g = parse_func(TWO)
    rw = _rewriter(g)
    a, y = g.nodes
    rw.anchor = y
    v = build(rw, a.result)
    assert v.name == name
    assert [n.results[0].name for n in g.nodes] == ["a", name, "y"]
    assert f"%{name} = {text}\n" in text_of(g)
    assert v.producer.span is y.span and v.span is y.span


@pytest.mark.parametrize("build", [
    lambda rw, at: rw.scalar(2.0, DType.fp16, at=at),
    lambda rw, at: rw.const_value(2.0, TensorType(DType.fp16, ()), at=at),
    lambda rw, at: rw.const_weight({"weight": "w"}, TensorType(DType.fp16, (4, 4, 1, 1)), at=at),
    lambda rw, at: rw.op("sigmoid", rw.graph.inputs[0], at=at),
])
def test_at_places_the_new_node_before_another_node_with_that_nodes_span(build):
    g = parse_func(TWO)
    rw = _rewriter(g)
    a, y = g.nodes
    rw.anchor = y
    v = build(rw, a)
    assert v.name.startswith("y_")  # still named after the node being rewritten
    assert g.nodes[0] is v.producer and g.nodes[1:] == [a, y]
    assert v.producer.span is a.span


def test_without_an_anchor_new_values_are_named_from_v_and_go_last():
    g = parse_func(TWO)
    rw = _rewriter(g)
    c = rw.scalar(2.0, DType.fp16)
    s = rw.op("sigmoid", g.inputs[0])
    assert (c.name, s.name) == ("v_c", "v_sigmoid")
    assert [n.results[0].name for n in g.nodes] == ["a", "y", "v_c", "v_sigmoid"]
    assert c.producer.span is None
    assert rw.name_for("") == "v"  # no suffix: the stem alone, when it is free


def test_name_for_derives_fresh_names_from_a_node():
    g = parse_func(TWO)
    rw = _rewriter(g)
    a, y = g.nodes
    rw.anchor = y
    assert rw.name_for("s") == "y_s"
    assert rw.name_for("s", base=a) == "a_s"
    taken = rw.name_for("")  # "y" is taken: a fresh name from it
    assert taken.startswith("y_") and taken[2:].isdigit() and not g.has_value_name(taken)


def test_a_record_made_outside_any_rule():
    g = parse_func(TWO)
    rw = _rewriter(g)
    entry = rw.record(None, "inputs reshaped to rank 4", name="x", span=g.nodes[0].span)
    assert entry == {"rule": "", "constraint": None, "node": "x", "location": "test.ir:3:8",
                     "detail": "inputs reshaped to rank 4", "func": "f"}
    assert rw.record("ANE-X", "no node") == {"rule": "", "constraint": "ANE-X", "node": None,
                                             "location": None, "detail": "no node", "func": "f"}
    assert len(rw.ctx.rewrites) == 2 and rw.ctx.rewrites[0] is entry


def test_a_value_replacing_two_returned_results_keeps_both_returned_names():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 8]) {
  %p, %q = split(%x, axis=1, sizes=[2, 2]) : fp16[1, 2, 1, 8], fp16[1, 2, 1, 8]
  return %p, %q
}""")

    def first_half_twice(node, rw):
        v = rw.op("slice", node.operands[0], begin=[0, 0, 0, 0], end=[1, 2, 1, 8])
        for r in node.results:
            rw.replace(r, v)
        return HANDLED

    assert rewrite_greedily(g, {"split": (first_half_twice,)}, _rewriter(g)) == 1
    assert g.output_names() == ["p", "q"]
    assert text_of(g) == """func f(%x: fp16[1, 4, 1, 8]) {
  %p = slice(%x, begin=[0, 0, 0, 0], end=[1, 2, 1, 8]) : fp16[1, 2, 1, 8]
  %q = identity(%p) : fp16[1, 2, 1, 8]
  return %p, %q
}
"""
    assert repr(HANDLED) == "HANDLED"  # how the sentinel shows in a traceback or a debugger


def test_erase_if_dead_erases_only_nodes_nothing_reads_or_returns():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 8]) {
  %a = relu(%x) : fp16[1, 4, 1, 8]
  %b = tanh(%a) : fp16[1, 4, 1, 8]
  %u = sigmoid(%x) : fp16[1, 4, 1, 8]
  return %b
}""")
    a, b, u = g.nodes
    assert erase_if_dead(g, a) is False   # read by %b
    assert erase_if_dead(g, b) is False   # returned
    assert erase_if_dead(g, u) is True    # unused
    assert erase_if_dead(g, u) is False   # already gone
    assert list(g.nodes) == [a, b]


def test_legalize_rules_that_never_settle_name_legalize(monkeypatch):
    import anec.passes.legalize as legalize

    def flip(node, rw):  # relu(x) -> relu(x): always matches
        return rw.op("relu", node.operands[0])

    monkeypatch.setattr(legalize, "rules_for", lambda target: {"relu": (flip,)})
    g = parse_func(TWO)
    with pytest.raises(PassError) as info:
        legalize.legalize_graph(g, PassContext.default("m4"))
    assert info.value.message == (f"legalize: rewrite rules did not reach a fixpoint after {MAX_SWEEPS} "
                                  "sweeps over func 'f'")
