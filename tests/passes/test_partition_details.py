"""The partition planner on small hand-built funcs whose plans are worked out by hand: a conv's
bias is one more BLOBFILE tensor and SRAM bytes of its stage, the reason a BLOBFILE cut gives
counts exactly one more item, an SRAM split goes to the cheapest cut nearest the middle, a
plan cut by both budgets names both, and the errors a func that fits no program raises."""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import ConstraintError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.passes.extract_stage import extract_stage
from anec.passes.partition_search import plan_partition
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

T = "fp16[1, 8, 1, 4]"  # one activation: 64 B; an [8, 8, 1, 1] weight: 128 B; a [1, 8, 1, 1] bias: 16 B


def _target(blobs: int = 16, sram: int = 1 << 40):
    return get_target("m4").replace(max_blob_tensors=blobs, sram_bytes=sram)


def _convs(n: int) -> str:
    """n 8->8 convs in a row, each reading a weight of its own."""
    lines = [f"func f(%x: {T}) {{"]
    prev = "%x"
    for i in range(n):
        lines += [f'  %w{i} = const(weight="w{i}") : fp16[8, 8, 1, 1]', f"  %c{i} = conv1x1({prev}, %w{i})"]
        prev = f"%c{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


_BIASED = f"""func f(%x: {T}) {{
  %w0 = const(weight="w0") : fp16[8, 8, 1, 1]
  %b0 = const(weight="b0") : fp16[1, 8, 1, 1]
  %c0 = conv1x1(%x, %w0, bias=%b0)
  %w1 = const(weight="w1") : fp16[8, 8, 1, 1]
  %b1 = const(weight="b1") : fp16[1, 8, 1, 1]
  %c1 = conv1x1(%c0, %w1, bias=%b1)
  return %c1
}}
"""


def test_a_convs_bias_is_a_weight_of_its_stage_and_counts_in_its_sram():
    """Two weights per program: each biased conv is a stage of its own holding its weight and its
    bias; its peak is %x + weight + bias + result = 64 + 128 + 16 + 64 B; the stages compose."""
    m = parse(_BIASED, "b.ir")
    g = m.funcs["f"]
    plan = plan_partition(g, _target(blobs=2))
    assert [(s.start, s.end) for s in plan.stages] == [(0, 1), (1, 2)]
    assert [[w.results[0].name for w in s.weights] for s in plan.stages] == [["w0", "b0"], ["w1", "b1"]]
    assert [s.peak_sram for s in plan.stages] == [272, 272]
    assert plan.describe()[2] == ("    cut after: BLOBFILE budget: with %c1 (conv1x1) the stage would need "
                                  "4 weight tensors (at most 2)")
    store = random_weights(m, 0)
    x = {"x": np.random.default_rng(0).standard_normal((1, 8, 1, 4)).astype(np.float16)}
    env = dict(x)
    for k, s in enumerate(plan.stages):
        sg = extract_stage(g, plan, k)
        assert sorted(c.attrs["weight"] for c in sg.nodes if c.op == "const") == sorted(
            w.attrs["weight"] for w in s.weights)
        conv = next(c for c in sg.nodes if c.op == "conv1x1")
        assert conv.optional["bias"].producer.attrs["weight"] == f"b{k}"  # the bias goes with its conv
        out = interpret(sg, {f"in{i}": env[v.name] for i, v in enumerate(s.inputs)}, store, mode="fp16")
        for i, v in enumerate(s.outputs):
            env[v.name] = np.asarray(out[f"out{i}"])
    np.testing.assert_array_equal(env["c1"], np.asarray(interpret(g, x, store, mode="fp16")["c1"]))


def test_the_blobfile_reason_counts_the_stage_plus_the_next_item_only():
    """Four convs, two weights per program: with %c2 the first stage would need 3 tensors (not 4,
    which it would need with %c3 too)."""
    plan = plan_partition(parse(_convs(4), "c.ir").funcs["f"], _target(blobs=2))
    assert [(s.start, s.end) for s in plan.stages] == [(0, 2), (2, 4)]
    assert plan.describe()[2] == ("    cut after: BLOBFILE budget: with %c2 (conv1x1) the stage would need "
                                  "3 weight tensors (at most 2)")


def test_a_plan_cut_by_both_budgets_names_both():
    """Two weights per program and an SRAM under one conv's 256 B: each BLOBFILE stage is split
    again, and the summary line lists both constraints."""
    plan = plan_partition(parse(_convs(4), "c.ir").funcs["f"], _target(blobs=2, sram=200))
    assert plan.constraints == ["ANE-BLOB-BUDGET", "ANE-SRAM"]
    assert plan.describe()[0] == ("func 'f' is cut into 4 programs (ANE-BLOB-BUDGET, ANE-SRAM); "
                                  "192 B cross stage boundaries")


def test_a_forced_plan_whose_peak_equals_the_sram_is_one_stage():
    """An SRAM of exactly the func's peak holds it: a forced plan is not split for the SRAM."""
    g = parse(_convs(4), "c.ir").funcs["f"]
    peak = plan_partition(g, _target(), force=True).stages[0].peak_sram
    plan = plan_partition(g, _target(sram=peak), force=True)
    assert [(s.start, s.end) for s in plan.stages] == [(0, 4)]
    assert len(plan_partition(g, _target(sram=peak - 1), force=True).stages) > 1


def _relus(n: int) -> str:
    """n relus in a row, every one returned: a stage of k >= 2 of them keeps k * 64 B live at its
    end, and every cut passes one 64 B activation."""
    lines = [f"func f(%x: {T}) {{"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  %r{i} = relu({prev})")
        prev = f"%r{i}"
    lines.append("  return " + ", ".join(f"%r{i}" for i in range(n)) + "\n}\n")
    return "\n".join(lines)


def test_an_sram_split_among_equally_cheap_cuts_takes_the_middle():
    """Six relus (384 B) in 192 B: all cuts cost the same, the middle one (after 3) leaves two
    halves of 192 B that fit, so two stages."""
    plan = plan_partition(parse(_relus(6), "r.ir").funcs["f"], _target(sram=192))
    assert [(s.start, s.end) for s in plan.stages] == [(0, 3), (3, 6)]
    assert [s.peak_sram for s in plan.stages] == [192, 192]


_MIDDLE_DEAR = f"""func f(%x: {T}, %y: {T}) {{
  %r0 = relu(%x)
  %r1 = add(%r0, %y)
  %r2 = add(%r1, %y)
  %r3 = relu(%r2)
  %r4 = relu(%r3)
  return %r0, %r1, %r2, %r3, %r4
}}
"""


def test_an_sram_split_takes_the_earlier_of_two_cheapest_cuts_equally_near_the_middle():
    """Five items (320 B) in 256 B: the middle cut (after 2) passes %r1 and %y (128 B); cuts after
    1 and after 3 pass 64 B and are both one item from it, so the earlier one is taken."""
    plan = plan_partition(parse(_MIDDLE_DEAR, "m.ir").funcs["f"], _target(sram=256))
    assert [(s.start, s.end) for s in plan.stages] == [(0, 1), (1, 5)]
    assert plan.crossing_bytes == 64


def test_the_hint_for_a_node_that_fits_no_program_says_how_to_fix_it():
    """A conv with a weight and a bias in programs of one weight: the error's hint in full."""
    with pytest.raises(ConstraintError) as ei:
        plan_partition(parse(_BIASED, "b.ir").funcs["f"], _target(blobs=1))
    assert ei.value.hint == ("split the op's weights (for a conv: chunk its output channels into several "
                             "convs), or compile it with its weights as program inputs (--weights-as-inputs)")


def test_an_inline_scalar_op_fits_no_program_when_no_blobfile_tensor_is_allowed():
    """With no BLOBFILE tensor allowed, the inline scalar's penalty leaves a program holding at
    most -1: the mul fits none, a located error."""
    g = parse(f"""func f(%x: {T}) {{
  %s = const(value=2.0) : fp16[]
  %z = mul(%x, %s)
  return %z
}}
""", "s.ir").funcs["f"]
    with pytest.raises(ConstraintError) as ei:
        plan_partition(g, _target(blobs=0))
    assert ei.value.constraint == "ANE-BLOB-BUDGET"
    assert ei.value.message == ("%z (mul) alone reads 0 BLOBFILE weight tensors; one m4 program holds "
                                "at most -1, so no program can contain it")
    assert ei.value.span.location == "s.ir:3:8"


def test_a_budget_below_zero_is_a_located_error_on_the_first_node():
    """A target whose programs hold fewer than zero BLOBFILE tensors fits not even a weightless
    relu: the planner names the first node instead of failing inside its search."""
    g = parse(f"""func f(%x: {T}) {{
  %a = relu(%x)
  %b = relu(%a)
  return %b
}}
""", "n.ir").funcs["f"]
    with pytest.raises(ConstraintError) as ei:
        plan_partition(g, _target(blobs=-1))
    assert ei.value.message == ("%a (relu) alone reads 0 BLOBFILE weight tensors; one m4 program holds "
                                "at most -1, so no program can contain it")
