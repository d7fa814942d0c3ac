"""annotate-sram, exact numbers on a program with every kind of operand and result: a weight bias
(an optional operand), a repeated operand, a multi-result node, a value const that is also returned,
a const carrying stale annotations; the spill threshold at exactly the SRAM size; a program with no step."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from anec.ir.printer import print_graph
from anec.passes import AnnotateSram, PassContext
from anec.targets import get_target

from tests.ir.strategies import graphs  # tests/ is on sys.path (rootdir-relative packages)

from .passes_util import parse_func, run

PROGRAM = """
func f(%x: fp16[1, 64, 1, 32]) {
  %w = const(weight="w") : fp16[64, 64, 1, 1]
  %b = const(weight="b") : fp16[1, 64, 1, 1] @{live_bytes=7, spill=true}
  %s = const(value=2.0) : fp16[1, 48, 1, 32]
  %y = conv1x1(%x, %w, bias=%b) : fp16[1, 64, 1, 32]
  %m = mul(%y, %y) : fp16[1, 64, 1, 32]
  %p, %q = split(%m, axis=1, sizes=[16, 48]) : fp16[1, 16, 1, 32], fp16[1, 48, 1, 32]
  %z = add(%q, %s) : fp16[1, 48, 1, 32]
  %r = relu(%p) : fp16[1, 16, 1, 32]
  return %z, %r, %s
}"""

# bytes (fp16): x, y, m = 64*32*2; w = 64*64*2; b = 64*2; p, r = 16*32*2; q, s, z = 48*32*2
X = Y = M = 4096
W, B = 8192, 128
P = R = 1024
Q = S = Z = 3072
# steps y(0) m(1) split(2) z(3) r(4); live intervals: x, w, b [0, 0]; y [0, 1]; m [1, 2];
# p [2, 4]; q [2, 3]; s [3, 4] (first use to the end: it is returned); z [3, 4]; r [4, 4]
LIVE = {
    "y": X + W + B + Y,   # 16512
    "m": Y + M,           # 8192
    "p": M + P + Q,       # 8192
    "z": S + P + Q + Z,   # 10240
    "r": S + P + Z + R,   # 8192
}


def _annotated(sram_bytes: int | None = None):
    g = parse_func(PROGRAM)
    target = get_target("m4")
    if sram_bytes is not None:
        target = target.replace(sram_bytes=sram_bytes)
    run(AnnotateSram(), g, PassContext(target=target))
    return g


def test_every_node_gets_its_bytes_and_the_live_bytes_at_its_step():
    g = _annotated()
    notes = {n.results[0].name: n.annotations for n in g.nodes}
    # the bias is an optional operand and a weight: counted with the weight, not as an input
    assert notes["y"] == {"in_bytes": X, "weight_bytes": W + B, "out_bytes": Y, "live_bytes": LIVE["y"]}
    # mul(%y, %y) reads one value: its bytes count once
    assert notes["m"] == {"in_bytes": Y, "weight_bytes": 0, "out_bytes": M, "live_bytes": LIVE["m"]}
    # a multi-result node outputs all its results
    assert notes["p"] == {"in_bytes": M, "weight_bytes": 0, "out_bytes": P + Q, "live_bytes": LIVE["p"]}
    # a value const is an input, not a weight
    assert notes["z"] == {"in_bytes": Q + S, "weight_bytes": 0, "out_bytes": Z, "live_bytes": LIVE["z"]}
    # %s is returned: it stays live after its last use, to the end of the program
    assert notes["r"] == {"in_bytes": P, "weight_bytes": 0, "out_bytes": R, "live_bytes": LIVE["r"]}
    # consts are not annotated, and stale SRAM annotations on them are removed
    assert [notes[c] for c in ("w", "b", "s")] == [{}, {}, {}]
    assert g.facts.sram == {"target": "m4", "sram_bytes": 32 * 1024 * 1024, "peak_bytes": 16512,
                              "peak_node": "y", "spill_nodes": [], "weight_bytes": W + B}


def test_the_annotated_program_text():
    text = print_graph(_annotated())
    assert text.splitlines()[2:9] == [
        '  %b = const(weight="b") : fp16[1, 64, 1, 1]',
        "  %s = const(value=2.0) : fp16[1, 48, 1, 32]",
        "  %y = conv1x1(%x, %w, bias=%b) : fp16[1, 64, 1, 32]"
        " @{in_bytes=4096, live_bytes=16512, out_bytes=4096, weight_bytes=8320}",
        "  %m = mul(%y, %y) : fp16[1, 64, 1, 32]"
        " @{in_bytes=4096, live_bytes=8192, out_bytes=4096, weight_bytes=0}",
        "  %p, %q = split(%m, axis=1, sizes=[16, 48]) : fp16[1, 16, 1, 32], fp16[1, 48, 1, 32]"
        " @{in_bytes=4096, live_bytes=8192, out_bytes=4096, weight_bytes=0}",
        "  %z = add(%q, %s) : fp16[1, 48, 1, 32]"
        " @{in_bytes=6144, live_bytes=10240, out_bytes=3072, weight_bytes=0}",
        "  %r = relu(%p) : fp16[1, 16, 1, 32]"
        " @{in_bytes=1024, live_bytes=8192, out_bytes=1024, weight_bytes=0}",
    ]


@pytest.mark.parametrize("sram_bytes, spills", [
    (LIVE["z"], ["y"]),              # exactly full is not a spill
    (LIVE["z"] - 1, ["y", "z"]),     # one byte more than the SRAM is
    (LIVE["m"] - 1, ["y", "m", "p", "z", "r"]),
    (LIVE["y"], []),
])
def test_a_spill_is_a_step_whose_live_bytes_exceed_the_sram(sram_bytes, spills):
    g = _annotated(sram_bytes)
    assert g.facts.sram["spill_nodes"] == spills
    assert [n.results[0].name for n in g.nodes if n.annotations.get("spill")] == spills
    assert g.facts.sram["peak_bytes"] == LIVE["y"] and g.facts.sram["sram_bytes"] == sram_bytes


def test_a_program_without_steps_has_no_peak():
    g = parse_func("""
func f(%x: fp16[1, 4, 1, 8]) {
  %c = const(weight="c") : fp16[1, 4, 1, 8]
  return %c
}""")
    run(AnnotateSram(), g)
    assert g.facts.sram == {"target": "m4", "sram_bytes": 32 * 1024 * 1024, "peak_bytes": 0,
                              "peak_node": None, "spill_nodes": [], "weight_bytes": 64}
    assert g.nodes[0].annotations == {}


def _live_bytes_by_definition(g) -> dict[str, int]:
    """Live bytes per step from the intervals themselves (quadratic, independent of the pass's
    one scan): a value defined at step d (0 for an input) and last read at step u is live at every
    step in [d, u]; a returned value to the last step; a const from its first read to its last."""
    steps = [n for n in g.nodes if n.op != "const"]
    at = {id(n): i for i, n in enumerate(steps)}
    last = len(steps) - 1
    if last < 0:
        return {}
    returned = {id(v) for v in g.outputs}
    live = [0] * len(steps)
    values = [(v, None) for v in g.inputs] + [(r, n) for n in g.nodes for r in n.results]
    for v, producer in values:
        reads = sorted(at[id(u)] for u in v.uses)
        if producer is not None and producer.op == "const":
            if not reads:
                continue
            start = reads[0]
        else:
            start = 0 if producer is None else at[id(producer)]
        end = last if id(v) in returned else (reads[-1] if reads else start)
        for i in range(start, end + 1):
            live[i] += v.type.nbytes
    return {n.results[0].name: live[i] for i, n in enumerate(steps)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_steps=16))
def test_live_bytes_equal_the_intervals_on_random_programs(g):
    run(AnnotateSram(), g)
    got = {n.results[0].name: n.annotations["live_bytes"] for n in g.nodes if n.op != "const"}
    want = _live_bytes_by_definition(g)
    assert got == want
    if want:
        assert g.facts.sram["peak_bytes"] == max(want.values())
