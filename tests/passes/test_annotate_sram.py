"""annotate-sram: bytes per node, live bytes along the schedule, spill marks."""

from __future__ import annotations

import pytest

from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.passes import AnnotateSram, Legalize, PassContext
from anec.targets import get_target

from .passes_util import parse_func, run

MLP = """
func f(%x: fp16[1, 768, 1, 64]) {
  %w = const(weight="w") : fp16[3072, 768, 1, 1]
  %h = conv1x1(%x, %w) : fp16[1, 3072, 1, 64]
  %y = relu(%h) : fp16[1, 3072, 1, 64]
  return %y
}"""


def test_bytes_and_live_bytes_of_each_node():
    g = parse_func(MLP)
    run(AnnotateSram(), g)
    conv, relu = g.nodes[1], g.nodes[2]
    x, w, h = 768 * 64 * 2, 3072 * 768 * 2, 3072 * 64 * 2
    assert conv.annotations == {"in_bytes": x, "weight_bytes": w, "out_bytes": h,
                                "live_bytes": x + w + h}
    # x and w are dead after the conv; h is read by the relu, y is returned
    assert relu.annotations == {"in_bytes": h, "weight_bytes": 0, "out_bytes": h,
                                "live_bytes": 2 * h}
    assert g.nodes[0].annotations == {}  # consts are not computed
    assert g.facts.sram == {"target": "m4", "sram_bytes": 32 * 1024 * 1024,
                              "peak_bytes": x + w + h, "peak_node": "h", "spill_nodes": [],
                              "weight_bytes": w}


def test_value_live_until_its_last_use():
    g = parse_func("""
func f(%x: fp16[1, 64, 1, 64]) {
  %a = relu(%x) : fp16[1, 64, 1, 64]
  %b = tanh(%a) : fp16[1, 64, 1, 64]
  %c = sigmoid(%b) : fp16[1, 64, 1, 64]
  %d = add(%a, %c) : fp16[1, 64, 1, 64]
  return %d
}""")
    run(AnnotateSram(), g)
    t = 64 * 64 * 2
    live = [n.annotations["live_bytes"] for n in g.nodes]
    # step a: x, a; step b: a, b; step c: a, b, c; step d: a, c, d
    assert live == [2 * t, 2 * t, 3 * t, 3 * t]


@pytest.mark.constraint("ANE-SRAM")
def test_spill_is_marked_when_live_set_exceeds_sram():
    g = parse_func(MLP)
    small = get_target("m4").replace(sram_bytes=4 * 1024 * 1024)
    run(AnnotateSram(), g, PassContext(target=small))
    assert g.nodes[1].annotations["spill"] is True  # 5 MB at the conv
    assert "spill" not in g.nodes[2].annotations     # 0.75 MB at the relu
    assert g.facts.sram["spill_nodes"] == ["h"]


def test_annotations_print_and_parse_back():
    m = parse(MLP)
    run(AnnotateSram(), m.func())
    text = print_module(m)
    assert "@{in_bytes=98304, live_bytes=5210112, out_bytes=393216, weight_bytes=4718592}" in text
    assert parse(text) == m


def test_rerun_replaces_stale_annotations():
    g = parse_func(MLP)
    small = get_target("m4").replace(sram_bytes=1024)
    run(AnnotateSram(), g, PassContext(target=small))
    assert g.nodes[2].annotations.get("spill") is True
    run(AnnotateSram(), g)
    assert all("spill" not in n.annotations for n in g.nodes)


def test_legalize_refreshes_the_report_for_the_rewritten_program():
    g = parse_func("""
func f(%x: fp16[1, 64, 1, 64]) {
  %w = const(weight="w") : fp16[64, 64, 1, 1]
  %b = const(weight="b") : fp16[1, 64, 1, 1]
  %y = conv1x1(%x, %w, bias=%b) : fp16[1, 64, 1, 64]
  return %y
}""")
    run((AnnotateSram(), Legalize()), g)
    assert [n.op for n in g.nodes] == ["const", "const", "conv1x1", "add"]
    assert all("live_bytes" in n.annotations for n in g.nodes if n.op != "const")
    assert g.facts.sram["peak_node"] == "y_conv"
