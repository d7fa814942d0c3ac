"""The exact text of the legality report (``anec check``) for each kind of node and func-level check.

Each program below is chosen so that one report shows one family of lines: the status of
every node as written (ok, rewritten, removed by which pass, replaced, rejected), the
func-level notes and errors, the BLOBFILE budget, the SRAM line with its spill risks, the
partition plan, the weight-range check and the verdict, with the columns aligned.
"""

from __future__ import annotations

import numpy as np

from anec.ir.builder import Builder
from anec.ir.graph import Module
from anec.passes.report import _size, legality, legality_report
from anec.weight_store import WeightStore

from .passes_util import parse_module

NOT_CHECKED = "  weight values: not checked (give weights to check the fp16 range)"

KINDS = """
func f(%x: fp16[1, 8, 1, 8]) {
  %l, %r = split(%x, axis=1, sizes=[4, 4]) : fp16[1, 4, 1, 8], fp16[1, 4, 1, 8]
  %two = const(value=2.0) : fp16[]
  %m = mul(%l, %two) : fp16[1, 4, 1, 8]
  %a = cast(%m, dtype=fp32) : fp32[1, 4, 1, 8]
  %b = cast(%a, dtype=fp16) : fp16[1, 4, 1, 8]
  %n = neg(%b) : fp16[1, 4, 1, 8]
  %dead = relu(%r) : fp16[1, 4, 1, 8]
  return %n
}

func wide(%x: fp16[1, 64, 1, 8]) {
  %w = const(weight="w") : fp16[40000, 64, 1, 1]
  %b = const(weight="b") : fp16[1, 40000, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 40000, 1, 8]
  %y = relu(%h) : fp16[1, 40000, 1, 8]
  return %y
}
"""


def test_report_names_what_happens_to_every_node_of_each_func():
    """One line per node as written, padded into columns; funcs separated by a blank line.

    f: the split becomes one slice (%r only feeds dead code), %m is the user's own
    scalar user (16 BLOBFILE tensors minus 1, no "added by legalize"), the cast round
    trip is folded by fuse-casts and its inner cast dropped by the second dce, %dead by
    the first dce. wide: 40000 output channels are chunked into 3 convs (limit 16384),
    weight and bias become 3 slices each (6 tensors), the relu is re-created per chunk,
    and the bias splits of the new convs (nodes the user never wrote) are func-level notes.
    """
    module = parse_module(KINDS, "kinds.ir")
    report = legality(module, "m4")
    assert report.errors == 0 and report.legal
    assert report.text == (
        "func f  (target m4)\n"
        "  kinds.ir:3:12  %l, %r  split  rewritten [ANE-SPLIT] split_to_slices: "
        "split into 2 along axis 1 -> 1 slice (%l)\n"
        "  kinds.ir:4:10  %two    const  ok\n"
        "  kinds.ir:5:8   %m      mul    ok\n"
        "  kinds.ir:6:8   %a      cast   removed: unused once fuse-casts folded the casts that read it (dce)\n"
        "  kinds.ir:7:8   %b      cast   removed: folded by fuse-casts (no-op cast, lossless chain or constant)\n"
        "  kinds.ir:8:8   %n      neg    rewritten [ANE-NEG] neg_to_mul: neg(x) -> mul(x, -1)\n"
        "  kinds.ir:9:11  %dead   relu   removed: never reaches a returned value (dce)\n"
        "  BLOBFILE tensors: 0 of 15; 16 minus 1 because %m takes an inline scalar\n"
        "  SRAM: peak 192 B at %l of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: ANE-legal on m4 after 2 rewrites\n"
        "\n"
        "func wide  (target m4)\n"
        "  kinds.ir:14:8  %w  const    replaced by sliced/permuted views of weight 'w' (legalize)\n"
        "  kinds.ir:15:8  %b  const    replaced by sliced/permuted views of weight 'b' (legalize)\n"
        "  kinds.ir:16:8  %h  conv1x1  rewritten [ANE-CONV-CHANNELS] chunk_wide_conv_output: conv1x1 "
        "with 40000 output channels (limit 16384) -> 3 chunked convs; output %y returned as "
        "%y__c0, %y__c1, %y__c2 (axis 1)\n"
        "  kinds.ir:17:8  %y  relu     removed: made redundant by the rewrites (legalize)\n"
        "  rewritten [ANE-CONV-BIAS] split_conv_bias: conv1x1 bias=%h_s_0 -> conv1x1 + add\n"
        "  rewritten [ANE-CONV-BIAS] split_conv_bias: conv1x1 bias=%h_s_2 -> conv1x1 + add\n"
        "  rewritten [ANE-CONV-BIAS] split_conv_bias: conv1x1 bias=%h_s_4 -> conv1x1 + add\n"
        "  BLOBFILE tensors: 6 of 16\n"
        "  SRAM: peak 2.2 MiB at %h__c2_conv of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: ANE-legal on m4 after 4 rewrites\n"
    )


REJECTED = """
func bad(%x: fp16[1, 64, 1, 8]) {
  %w = const(weight="w") : fp16[40000, 64, 1, 1]
  %b = const(value=0.5) : fp16[1, 40000, 1, 1]
  %h = conv1x1(%x, %w, bias=%b) : fp16[1, 40000, 1, 8]
  %y = relu(%h) : fp16[1, 40000, 1, 8]
  %g = conv1x1(%x, %w) : fp16[1, 40000, 1, 8]
  %z = add(%g, %g) : fp16[1, 40000, 1, 8]
  return %y, %z
}

func ints(%k: int32[1, 8, 1, 8]) {
  %s = add(%k, %k) : int32[1, 8, 1, 8]
  return %s
}

func good(%x: fp16[1, 8, 1, 8]) {
  %y = relu(%x) : fp16[1, 8, 1, 8]
  return %y
}
"""


def test_report_lists_each_rejection_once_and_counts_the_errors_of_all_funcs():
    """A value-const bias cannot be sliced: the conv is rejected, once, at the user's line
    (legalize rewrites no node it rejected, so the bias is not split off into a new conv that
    would be rejected again under a name the user never wrote); a second wide conv is used
    inside the program. An int32 output is rejected at its node, an int32 input at the func
    level with its location. Every func's rejections count, although the last func is legal.
    """
    report = legality(parse_module(REJECTED, "rej.ir"), "m4")
    fix = ("      fix: return the conv result as its own output (anec then splits it into outputs "
           "{}__c0, ...), or split the weight into convs of at most 16384 output channels\n")
    int32 = "is int32 (int32[1, 8, 1, 8]); program inputs and outputs must be fp16 or fp32 tensors\n"
    assert report.text == (
        "func bad  (target m4)\n"
        "  rej.ir:3:8  %w  const    ok\n"
        "  rej.ir:4:8  %b  const    ok\n"
        "  rej.ir:5:8  %h  conv1x1  REJECTED [ANE-CONV-CHANNELS] conv1x1 %h has 40000 output channels; "
        "m4 allows 16384, and anec cannot chunk it because its weight or bias cannot be sliced along "
        "the output channels\n"
        + fix.format("h") +
        "  rej.ir:6:8  %y  relu     ok\n"
        "  rej.ir:7:8  %g  conv1x1  REJECTED [ANE-CONV-CHANNELS] conv1x1 %g has 40000 output channels; "
        "m4 allows 16384, and anec cannot chunk it because its result is used inside the program\n"
        + fix.format("g") +
        "  rej.ir:8:8  %z  add      ok\n"
        "  BLOBFILE tensors: 1 of 16\n"
        "  SRAM: peak 6.1 MiB at %y of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: NOT ANE-legal on m4: 2 errors\n"
        "\n"
        "func ints  (target m4)\n"
        f"  rej.ir:13:8  %s  add  REJECTED [ANE-IO-TENSORS] output %s {int32}"
        "      fix: cast it before returning: cast(%s, dtype=fp16)\n"
        f"  rej.ir:12:11: REJECTED [ANE-IO-TENSORS] input %k {int32}"
        "      fix: declare %k as fp16 (or fp32) and cast it inside the program: cast(%k, dtype=int32)\n"
        "  BLOBFILE tensors: 0 of 16\n"
        "  SRAM: peak 512 B at %s of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: NOT ANE-legal on m4: 2 errors\n"
        "\n"
        "func good  (target m4)\n"
        "  rej.ir:18:8  %y  relu  ok\n"
        "  BLOBFILE tensors: 0 of 16\n"
        "  SRAM: peak 256 B at %y of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: ANE-legal on m4 after 0 rewrites\n"
    )
    assert report.errors == 4 and not report.legal


def test_report_of_a_built_graph_without_source_locations():
    """Graphs built with the Builder (model frontends) have no spans: "-" in the location
    column, and a func-level rejection without a ``file:line:col:`` prefix."""
    b = Builder("built")
    x = b.input("x", "fp32", [1, 8, 1, 8])
    xh = b.cast(x, dtype="fp16", name="xh")
    h = b.conv1x1(xh, b.const_weight("w", "fp16[8, 8, 1, 1]", name="w"), name="h")
    b.ret(b.relu(h, name="y"))
    report = legality(Builder.module(b), "m1")
    assert report.text == (
        "func built  (target m1)\n"
        "  -  %xh  cast     ok\n"
        "  -  %w   const    ok\n"
        "  -  %h   conv1x1  ok\n"
        "  -  %y   relu     ok\n"
        "  REJECTED [ANE-FP32-IO] input %x is fp32; m1 rejects fp32 program I/O\n"
        "      fix: declare %x as fp16 and convert on the host, or compile with --host-casts to let "
        "anec do that\n"
        "  BLOBFILE tensors: 1 of 16\n"
        "  SRAM: peak 384 B at %xh of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: NOT ANE-legal on m1: 1 error\n"
    )
    assert report.errors == 1


def test_report_of_a_func_without_nodes():
    """A built func may return its input directly (the verifier refuses that, the
    Builder does not): the report lists no nodes, and the SRAM line names no peak node."""
    e = Builder("empty")
    e.ret(e.input("z", "fp16", [1, 4, 1, 4]))
    report = legality(Builder.module(e), "m4")
    assert report.text == (
        "func empty  (target m4)\n"
        "  BLOBFILE tensors: 0 of 16\n"
        "  SRAM: peak 0 B of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: ANE-legal on m4 after 0 rewrites\n"
    )
    assert report.legal


def test_empty_module_has_an_empty_report():
    report = legality(Module(), "m4")
    assert report.text == "" and report.errors == 0


WEIGHTED = """
func f(%x: fp16[1, 8, 1, 8]) {
  %w = const(weight="w") : fp16[8, 8, 1, 1]
  %y = conv1x1(%x, %w) : fp16[1, 8, 1, 8]
  return %y
}
"""


def test_report_checks_weight_values_when_given_weights():
    """With weights the fp16-range check runs (and the "not checked" line goes away)."""
    module = parse_module(WEIGHTED, "w.ir")
    big = np.full((8, 8, 1, 1), 0.5, np.float32)
    big[0, 0, 0, 0], big[1, 2, 0, 0] = 1e6, -7e4
    assert legality_report(module, "m4", weights=WeightStore({"w": big})) == (
        "func f  (target m4)\n"
        "  w.ir:3:8  %w  const    REJECTED [ANE-FP16-RANGE] weight 'w' has 2 values beyond the fp16 "
        "range +-65504 (largest |v| = 1e+06); on the ANE they become inf\n"
        "      fix: rescale the weight (and undo the scale after the op), or use -1e4 instead of huge "
        "magnitudes for masks\n"
        "  w.ir:4:8  %y  conv1x1  ok\n"
        "  BLOBFILE tensors: 1 of 16\n"
        "  SRAM: peak 384 B at %y of 32.0 MiB; no spill risk (ANE-SRAM)\n"
        "  verdict: NOT ANE-legal on m4: 1 error\n"
    )
    fine = legality(module, "m4", weights=WeightStore({"w": np.full((8, 8, 1, 1), 0.5, np.float32)}))
    assert fine.legal and "weight values" not in fine.text
    assert NOT_CHECKED in legality_report(module, "m4")


SPILL = """
func s(%x: fp16[1, 4096, 1, 4096]) {
  %a = relu(%x) : fp16[1, 4096, 1, 4096]
  %b = add(%a, %x) : fp16[1, 4096, 1, 4096]
  return %b
}
"""


def test_report_shows_the_partition_plan_and_the_spill_risks():
    """Three 32 MiB tensors live at once do not fit m4's 32 MiB SRAM: the func is cut into
    two programs (the plan, stage by stage) and both nodes are spill risks."""
    report = legality(parse_module(SPILL, "s.ir"), "m4")
    assert report.text == (
        "func s  (target m4)\n"
        "  s.ir:3:8  %a  relu  ok\n"
        "  s.ir:4:8  %b  add   ok\n"
        "  rewritten [ANE-SRAM] partition: func 's' is cut into 2 programs "
        "(67108864 bytes cross stage boundaries)\n"
        "  BLOBFILE tensors: 0 in all; one program holds 16\n"
        "  func 's' is cut into 2 programs (ANE-SRAM); 64.0 MiB cross stage boundaries\n"
        "    stage 0: 1 nodes, %a (s.ir:3:8) .. %a (s.ir:3:8); weights 0 of 16; peak SRAM 64.0 MiB; "
        "in 1 (32.0 MiB), out 1 (32.0 MiB)\n"
        "      cut after: SRAM: the stage would keep 96.0 MiB live (the target has 32.0 MiB); "
        "this cut passes the fewest bytes (64.0 MiB)\n"
        "    stage 1: 1 nodes, %b (s.ir:4:8) .. %b (s.ir:4:8); weights 0 of 16; peak SRAM 96.0 MiB; "
        "in 2 (64.0 MiB), out 1 (32.0 MiB)\n"
        "      cut after: the end of the func\n"
        "  SRAM: peak 96.0 MiB at %b of 32.0 MiB; spill risk at %a, %b (ANE-SRAM)\n"
        f"{NOT_CHECKED}\n"
        "  verdict: ANE-legal on m4 after 1 rewrite\n"
    )


def test_sizes_print_in_the_largest_unit_rounded_half_to_even():
    assert [_size(n) for n in (0, 1023, 1024, 1065, 1150, 1280, 1792, 2304)] == [
        "0 B", "1023 B", "1.0 KiB", "1.0 KiB", "1.1 KiB", "1.2 KiB", "1.8 KiB", "2.2 KiB"]
    assert _size((1 << 20) - 1) == "1024.0 KiB"  # 1023.999 KiB rounds up, the unit stays
    assert [_size(1 << 20), _size(1 << 30), _size(3 << 29)] == ["1.0 MiB", "1.0 GiB", "1.5 GiB"]
    assert _size(1 << 80) == "1125899906842624.0 GiB"  # beyond float precision, exact
    # the same digits as formatting the float quotient, for every byte count up to 64 KiB
    for n in range(1024, 1 << 16):
        assert _size(n) == f"{n / 1024:.1f} KiB"


def test_a_node_whose_two_results_are_illegal_outputs_gets_both_errors_on_its_line():
    src = """func f(%x: int32[1, 4, 1, 8]) {
  %a, %b = split(%x, axis=1, sizes=[2, 2]) : int32[1, 2, 1, 8], int32[1, 2, 1, 8]
  return %a, %b
}"""
    report = legality(parse_module(src, "io.ir"), "m4")
    head = "  io.ir:2:12  %a, %b  split  "
    why = "is int32 (int32[1, 2, 1, 8]); program inputs and outputs must be fp16 or fp32 tensors"
    assert report.errors == 3
    assert report.text.splitlines()[1:6] == [
        f"{head}REJECTED [ANE-IO-TENSORS] output %a {why}",
        "      fix: cast it before returning: cast(%a, dtype=fp16)",
        " " * len(head) + f"REJECTED [ANE-IO-TENSORS] output %b {why}",
        "      fix: cast it before returning: cast(%b, dtype=fp16)",
        "  io.ir:1:8: REJECTED [ANE-IO-TENSORS] input %x is int32 (int32[1, 4, 1, 8]); program inputs and "
        "outputs must be fp16 or fp32 tensors",
    ]


def test_rejections_of_nodes_legalize_made_are_func_level_errors_at_the_source_line():
    """The concat's partial convs (nodes the user never wrote) are each too wide and read inside
    the program: their rejections are listed after the nodes, at the conv's line, by their own
    names; the user's nodes keep their rewrite lines."""
    src = """func f(%a: fp16[1, 8, 1, 8], %b: fp16[1, 8, 1, 8]) {
  %c = concat(%a, %b, axis=1) : fp16[1, 16, 1, 8]
  %w = const(weight="w") : fp16[40000, 16, 1, 1]
  %h = conv1x1(%c, %w) : fp16[1, 40000, 1, 8]
  %y = relu(%h) : fp16[1, 40000, 1, 8]
  return %h, %y
}"""
    report = legality(parse_module(src, "p.ir"), "m4")
    why = ("has 40000 output channels; m4 allows 16384, and anec cannot chunk it because its "
           "result is used inside the program")
    fix = ("      fix: return the conv result as its own output (anec then splits it into outputs "
           "{}__c0, ...), or split the weight into convs of at most 16384 output channels")
    assert report.errors == 2 and not report.legal
    assert report.text.splitlines()[1:10] == [
        "  p.ir:2:8  %c  concat   rewritten [ANE-CONCAT] split_concat_into_partial_convs: channel concat "
        "of 2 tensors feeding %h removed: each conv reads the pieces directly",
        "  p.ir:3:8  %w  const    replaced by sliced/permuted views of weight 'w' (legalize)",
        "  p.ir:4:8  %h  conv1x1  rewritten [ANE-CONCAT] split_concat_into_partial_convs: conv1x1 over "
        "concat %c -> sum of 2 partial convs over slices of weight 'w'",
        "  p.ir:5:8  %y  relu     ok",
        f"  p.ir:4:8: REJECTED [ANE-CONV-CHANNELS] conv1x1 %h_part {why}",
        fix.format("h_part"),
        f"  p.ir:4:8: REJECTED [ANE-CONV-CHANNELS] conv1x1 %h_part_1 {why}",
        fix.format("h_part_1"),
        "  BLOBFILE tensors: 2 of 16",
    ]
