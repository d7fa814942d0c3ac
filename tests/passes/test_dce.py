"""dce: removes what cannot reach an output; never outputs or inputs."""

from __future__ import annotations

import pytest

from anec.passes import DeadCodeElimination, PassContext

from .passes_util import ops_of, parse_func, run


def test_dce_removes_unused_nodes_and_weight_consts():
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 4]) {
  %w = const(weight="w") : fp16[8, 8, 1, 1]
  %dead = conv1x1(%x, %w) : fp16[1, 8, 1, 4]
  %dead2 = relu(%dead) : fp16[1, 8, 1, 4]
  %y = tanh(%x) : fp16[1, 8, 1, 4]
  return %y
}""")
    run(DeadCodeElimination(), g)
    assert ops_of(g) == ["tanh"]
    assert g.output_names() == ["y"]


@pytest.mark.constraint("ANE-LIVE-OUTPUTS")
def test_dce_keeps_outputs_and_inputs():
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 4], %unused: fp16[1, 8, 1, 4]) {
  %a = relu(%x) : fp16[1, 8, 1, 4]
  %b = tanh(%a) : fp16[1, 8, 1, 4]
  return %b, %a
}""")
    before = g.clone()
    run(DeadCodeElimination(), g)
    assert g == before  # nothing dead: outputs, their producers and inputs all stay
    assert [v.name for v in g.inputs] == ["x", "unused"]
    assert g.output_names() == ["b", "a"]


def test_dce_keeps_multi_result_node_with_one_live_result():
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 4]) {
  %l, %r = split(%x, axis=1, sizes=[4, 4]) : fp16[1, 4, 1, 4], fp16[1, 4, 1, 4]
  %y = relu(%l) : fp16[1, 4, 1, 4]
  return %y
}""")
    run(DeadCodeElimination(), g)
    assert ops_of(g) == ["split", "relu"]


def test_dce_removes_a_multi_result_node_whose_results_are_all_dead():
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 4]) {
  %l, %r = split(%x, axis=1, sizes=[4, 4]) : fp16[1, 4, 1, 4], fp16[1, 4, 1, 4]
  %d = add(%l, %r) : fp16[1, 4, 1, 4]
  %y = relu(%x) : fp16[1, 8, 1, 4]
  return %y
}""")
    run(DeadCodeElimination(), g)
    assert ops_of(g) == ["relu"]


def test_dce_usable_alone_without_manager():
    g = parse_func("""
func f(%x: fp16[1, 8, 1, 4]) {
  %c = const(value=2.0) : fp16[]
  %y = relu(%x) : fp16[1, 8, 1, 4]
  return %y
}""")
    DeadCodeElimination().run(g, PassContext.default())
    assert ops_of(g) == ["relu"]
