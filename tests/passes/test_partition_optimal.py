"""The partition planner against an exhaustive search: on small random funcs, every set of
cuts is tried, and the plan must use the fewest stages, and among those cross the fewest
bytes, that any legal set of cuts achieves; its crossing bytes, stage inputs, outputs,
weights and caps must be what the definitions in anec/passes/partition_search.py's docstring
give when computed the slow way."""

from __future__ import annotations

import itertools

import numpy as np

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.diagnostics import ConstraintError
from anec.ir.parser import parse
from anec.passes.partition_search import _Sweep, plan_partition
from anec.targets import get_target

S = 4
WIDTHS = (8, 24)  # two activation sizes, so that where a cut falls changes the bytes


@st.composite
def funcs(draw):
    """A func of 2..11 items: convs changing the width (a weight const sometimes read again), adds of
    two values of one width (skips), relus, inline-scalar muls, fp32 round trips and int32 values
    that live across later items, a second input read late, several outputs."""
    n = draw(st.integers(2, 11))
    lines = [f"func g(%x: fp16[1, {WIDTHS[0]}, 1, {S}], %y: fp16[1, {WIDTHS[1]}, 1, {S}]) {{"]
    vals = [("%x", WIDTHS[0])]
    late = [("%y", WIDTHS[1])]  # the second input becomes usable after the first items
    keys: dict[tuple[int, int], str] = {}
    n_keys = 0
    pending: list[tuple[str, int]] = []  # fp32 values not cast back yet: they cross later items
    for i in range(n):
        if i == n // 2:
            vals += late
        if pending and draw(st.booleans()):
            f, wf = pending.pop(0)
            lines.append(f"  %b{i} = cast({f}, dtype=fp16)")
            vals.append((f"%b{i}", wf))
        a, wa = draw(st.sampled_from(vals[-5:]))
        kind = draw(st.sampled_from(["conv", "conv", "add", "relu", "scale", "fp32", "int32"]))
        out = f"%v{i}"
        if kind == "conv":
            wo = draw(st.sampled_from(WIDTHS))
            if (wo, wa) in keys and draw(st.booleans()):
                w = keys[(wo, wa)]  # the same weight const read again
            else:
                w = keys[(wo, wa)] = f"%w{i}"
                lines.append(f'  %w{i} = const(weight="k{n_keys}") : fp16[{wo}, {wa}, 1, 1]')
                n_keys += 1
            lines.append(f"  {out} = conv1x1({a}, {w})")
            vals.append((out, wo))
        elif kind == "add":
            same = [v for v in vals if v[1] == wa]
            b, _ = draw(st.sampled_from(same))
            lines.append(f"  {out} = add({a}, {b})")
            vals.append((out, wa))
        elif kind == "scale":
            lines.append(f"  %s{i} = const(value=0.5) : fp16[]\n  {out} = mul({a}, %s{i})")
            vals.append((out, wa))
        elif kind == "fp32":  # an fp32 value live across 1..3 cuts, then fp16 again (now or later)
            lines.append(f"  %f{i}_0 = cast({a}, dtype=fp32)")
            hops = draw(st.integers(0, 2))
            for h in range(hops):
                lines.append(f"  %f{i}_{h + 1} = relu(%f{i}_{h})")
            if draw(st.booleans()):
                pending.append((f"%f{i}_{hops}", wa))
                lines.append(f"  {out} = relu({a})")
            else:
                lines.append(f"  {out} = cast(%f{i}_{hops}, dtype=fp16)")
            vals.append((out, wa))
        elif kind == "int32":  # an integer value: never program I/O, on any target
            lines.append(f"  %n{i} = cast({a}, dtype=int32)\n  {out} = relu({a})")
            pending.append((f"%n{i}", wa))
            vals.append((out, wa))
        else:
            lines.append(f"  {out} = relu({a})")
            vals.append((out, wa))
    for j, (f, wf) in enumerate(pending):
        lines.append(f"  %e{j} = cast({f}, dtype=fp16)")
        vals.append((f"%e{j}", wf))
    last = vals[-1][0]
    extra = draw(st.lists(st.sampled_from([v for v, _ in vals[1:]]), max_size=2))
    outs = list(dict.fromkeys([last, *extra]))
    lines.append(f"  return {', '.join(outs)}\n}}\n")
    return "\n".join(lines)


class _Slow:
    """The planner's definitions, computed directly from the graph."""

    def __init__(self, graph, target):
        self.graph, self.target = graph, target
        self.items = [x for x in graph.nodes if x.op != "const"]
        self.pos = {id(x): i for i, x in enumerate(self.items)}

    def uses(self, v):
        return [self.pos[id(u)] for u in v.uses if id(u) in self.pos]

    def crossing(self, j):
        """Values that cross a cut before item j: defined before j (a func input: first used
        before j) and used by an item at or after j."""
        out = []
        for v in [*self.graph.inputs, *(r for x in self.items for r in x.results)]:
            uses = self.uses(v)
            if not uses or max(uses) < j:
                continue
            born = min(uses) if v.producer is None else self.pos[id(v.producer)]
            if born < j:
                out.append(v)
        return out

    def allowed(self, j):
        def io(v):
            dt = v.type.dtype.value
            return dt in ("fp16", "fp32") and (dt != "fp32" or self.target.fp32_io)
        return all(io(v) for v in self.crossing(j))

    def weights(self, run):
        found = {}
        for x in run:
            for v in x.inputs():
                p = v.producer
                if p is not None and p.op == "const" and "weight" in p.attrs:
                    found[id(p)] = p
        return found

    def cap(self, run):
        scalar = any(x.op in ("add", "sub", "mul", "real_div", "maximum", "minimum")
                     and any(v.producer is not None and v.producer.op == "const" and v.type.rank == 0
                             for v in x.operands) for x in run)
        return self.target.max_blob_tensors - (self.target.scalar_penalty if scalar else 0)

    def legal(self, run):
        return len(self.weights(run)) <= self.cap(run)

    def error(self):
        """(constraint, message, span, hint) of the planner's refusal: first an item that alone
        breaks the budget, else the first place where a stage must end (the end, or an allowed
        cut) but no legal stage ending there starts where the items before it can end."""
        items, t = self.items, self.target
        for x in items:
            if not self.legal([x]):
                return ("ANE-BLOB-BUDGET",
                        f"%{x.results[0].name} ({x.op}) alone reads {len(self.weights([x]))} BLOBFILE weight "
                        f"tensors; one {t.name} program holds at most {self.cap([x])}, so no program can "
                        "contain it", x.span,
                        "split the op's weights (for a conv: chunk its output channels into several convs), "
                        "or compile it with its weights as program inputs (--weights-as-inputs)")
        n = len(items)
        reach = [True] + [False] * n
        for i in range(1, n + 1):
            if i < n and not self.allowed(i):
                continue
            reach[i] = any(reach[j] and (j == 0 or self.allowed(j)) and self.legal(items[j:i]) for j in range(i))
            if not reach[i]:
                x = items[i - 1]
                return ("ANE-BLOB-BUDGET",
                        f"func '{self.graph.name}' cannot be cut into legal programs around %{x.results[0].name}: "
                        "every cut near it would pass an integer, bool or (on this target) fp32 tensor between "
                        "programs, and the BLOBFILE budget forbids keeping the run in one", x.span,
                        "cast the value to fp16 before its later uses, or make its weights program inputs")
        raise AssertionError("a plan exists")

    def best(self):
        """(stages, crossing bytes) of the best legal set of cuts, or None."""
        n = len(self.items)
        points = [j for j in range(1, n) if self.allowed(j)]
        best = None
        for k in range(len(points) + 1):
            for cuts in itertools.combinations(points, k):
                bounds = [0, *cuts, n]
                if all(self.legal(self.items[a:b]) for a, b in zip(bounds, bounds[1:])):
                    cost = (k + 1, sum(v.type.nbytes for j in cuts for v in self.crossing(j)))
                    best = cost if best is None or cost < best else best
            if best is not None:
                return best  # fewer stages always win: no need to try more cuts
        return None


TARGETS = {"m4": get_target("m4"), "m1": get_target("m1")}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=funcs(), budget=st.integers(1, 5), chip=st.sampled_from(sorted(TARGETS)))
def test_the_plan_is_the_exhaustive_searchs_best(text, budget, chip):
    graph = parse(text, "g.ir").funcs["g"]
    target = TARGETS[chip].replace(max_blob_tensors=budget, sram_bytes=1 << 40)  # the budget alone cuts
    slow = _Slow(graph, target)
    sweep = _Sweep(graph, slow.items, target)  # the one-pass sweep the search reads cuts from
    inner = range(1, len(slow.items))
    assert [sweep.cross[j] for j in inner] == [sum(v.type.nbytes for v in slow.crossing(j)) for j in inner]
    assert [sweep.bad[j] for j in inner] == [not slow.allowed(j) for j in inner]
    assert sweep.cross[0] == 0 and not sweep.bad[0]
    best = slow.best()
    if best is None:
        with pytest.raises(ConstraintError) as ei:
            plan_partition(graph, target, force=True)
        assert (ei.value.constraint, ei.value.message, ei.value.span, ei.value.hint) == slow.error(), text
        return
    plan = plan_partition(graph, target, force=True)
    assert (len(plan.stages), plan.crossing_bytes) == best, text
    assert [x for x in plan.items] == slow.items
    cuts = [s.start for s in plan.stages[1:]]
    assert all(slow.allowed(j) for j in cuts), (cuts, text)
    assert plan.crossing_bytes == sum(v.type.nbytes for j in cuts for v in slow.crossing(j))
    assert plan.over_blobs == (len(slow.weights(slow.items)) > slow.cap(slow.items))
    returned = {id(v) for v in graph.outputs}
    for s in plan.stages:
        run = slow.items[s.start:s.end]
        inside = {id(x) for x in run}
        reads = [v for x in run for v in x.inputs()
                 if not (v.producer is not None and (v.producer.op == "const" or id(v.producer) in inside))]
        assert [id(v) for v in s.inputs] == list(dict.fromkeys(id(v) for v in reads))
        later = [r for x in run for r in x.results
                 if id(r) in returned or any(u >= s.end for u in slow.uses(r))]
        assert [id(v) for v in s.outputs] == [id(v) for v in later]
        assert {id(w) for w in s.weights} == set(slow.weights(run)) and len(s.weights) == len(slow.weights(run))
        assert s.blob_cap == slow.cap(run) and len(s.weights) <= s.blob_cap
        assert s.in_bytes == sum(v.type.nbytes for v in s.inputs)
        assert s.out_bytes == sum(v.type.nbytes for v in s.outputs)
    if len(plan.stages) == 1 and not plan.over_blobs:
        assert plan_partition(graph, target) is None  # fits one program: not cut unless forced
        # an SRAM of exactly the one program's peak still holds it (with or without the bound)
        peak = plan.stages[0].peak_sram
        assert plan_partition(graph, target.replace(sram_bytes=peak)) is None
        assert plan_partition(graph, target.replace(sram_bytes=peak), peak_bound=peak) is None
        assert len(plan_partition(graph, target, force=True, peak_bound=peak).stages) == 1  # forced: planned
        # over the SRAM: split where a cut can be made, else one program (its spill risk reported)
        over = plan_partition(graph, target.replace(sram_bytes=peak - 1))
        assert over is None or len(over.stages) > 1


def _four_convs(s: int) -> str:
    """conv 8->24, relu, conv 24->8, add of the input (a skip), then the same again: with two
    weight tensors per program, the cut goes between the halves, after the add (cutting before it
    would pass the input as well)."""
    return f"""func f(%x: fp16[1, 8, 1, {s}]) {{
  %w0 = const(weight="w0") : fp16[24, 8, 1, 1]
  %c0 = conv1x1(%x, %w0)
  %r0 = relu(%c0)
  %w1 = const(weight="w1") : fp16[8, 24, 1, 1]
  %c1 = conv1x1(%r0, %w1)
  %r1 = add(%c1, %x)
  %w2 = const(weight="w2") : fp16[24, 8, 1, 1]
  %c2 = conv1x1(%r1, %w2)
  %r2 = relu(%c2)
  %w3 = const(weight="w3") : fp16[8, 24, 1, 1]
  %c3 = conv1x1(%r2, %w3)
  %r3 = relu(%c3)
  return %r3
}}
"""


# Peak SRAM by hand (the annotate-sram model: a value lives from its definition to its last
# use, a stage input from the start, a weight at the step that reads it; an 8-channel
# activation is 16*s bytes, a 24-channel one 48*s, a weight 384 B). Stage 0: at the first conv
# %x + %w0 + %c0 = 64s + 384, at the relu %x + %c0 + %r0 = 112s, at the second conv
# %x + %r0 + %w1 + %c1 = 80s + 384. Stage 1: 64s + 384 at either conv, %c2 + %r2 = 96s at the
# relu between them. Small s: the weights decide (704 B, 640 B); large s: the relus.
@pytest.mark.parametrize("s,unit", [
    (4, ("64 B", "704 B", "640 B")),
    (256, ("4.0 KiB", "28.0 KiB", "24.0 KiB")),
    (65536, ("1.0 MiB", "7.0 MiB", "6.0 MiB")),
])
def test_the_plan_explains_each_stage_and_cut(s, unit):
    graph = parse(_four_convs(s), "f.ir").funcs["f"]
    plan = plan_partition(graph, get_target("m4").replace(max_blob_tensors=2, sram_bytes=1 << 40))
    cross, peak0, peak1 = unit
    assert plan.describe() == [
        f"func 'f' is cut into 2 programs (ANE-BLOB-BUDGET); {cross} cross stage boundaries",
        f"  stage 0: 4 nodes, %c0 (f.ir:3:9) .. %r1 (f.ir:7:9); weights 2 of 2; peak SRAM {peak0}; "
        f"in 1 ({cross}), out 1 ({cross})",
        "    cut after: BLOBFILE budget: with %c2 (conv1x1) the stage would need 3 weight tensors (at most 2)",
        f"  stage 1: 4 nodes, %c2 (f.ir:9:9) .. %r3 (f.ir:13:9); weights 2 of 2; peak SRAM {peak1}; "
        f"in 1 ({cross}), out 1 ({cross})",
        "    cut after: the end of the func",
    ]
    assert plan.constraints == ["ANE-BLOB-BUDGET"]


def test_cuts_forced_by_the_sram_alone_say_so():
    # within the weight budget, but the func keeps 704 B live at its second conv and the SRAM
    # holds 650 B: split at the cheapest cut nearest the middle (after %r1: 64 B), then the
    # first half again (704 B) after %c1 (%c1, and %x which the host then writes into the next
    # stage as well: 128 B, the cheapest inside it)
    graph = parse(_four_convs(4), "f.ir").funcs["f"]
    for item in graph.nodes:
        if item.results[0].name == "r3":
            item.span = None  # a node without a source location (built by a frontend)
    plan = plan_partition(graph, get_target("m4").replace(max_blob_tensors=16, sram_bytes=650))
    assert plan.constraints == ["ANE-SRAM"] and not plan.over_blobs
    lines = plan.describe()
    assert lines[0] == "func 'f' is cut into 3 programs (ANE-SRAM); 192 B cross stage boundaries"
    assert lines[1].startswith("  stage 0: 3 nodes, %c0 (f.ir:3:9) .. %c1 (f.ir:6:9); weights 2 of 16; "
                               "peak SRAM 640 B; in 1 (64 B), out 1 (64 B)")  # %x: the host feeds it again
    assert lines[2] == ("    cut after: SRAM: the stage would keep 704 B live (the target has 650 B); "
                        "this cut passes the fewest bytes (128 B)")
    assert lines[3].startswith("  stage 1: 1 nodes, %r1 (f.ir:7:9) .. %r1 (f.ir:7:9); ")
    assert lines[4] == ("    cut after: SRAM: the stage would keep 704 B live (the target has 650 B); "
                        "this cut passes the fewest bytes (64 B)")
    assert lines[5].startswith("  stage 2: 4 nodes, %c2 (f.ir:9:9) .. %r3 (?); ")
    assert lines[6] == "    cut after: the end of the func"


_RANK2 = """func f(%x: fp16[4, 16], %b: fp16[4, 16]) {
  %w0 = const(weight="w0") : fp16[16, 16]
  %m0 = matmul(%x, %w0)
  %r0 = relu(%m0)
  %w1 = const(weight="w1") : fp16[16, 16]
  %m1 = matmul(%r0, %w1)
  %s = const(value=0.5) : fp16[]
  %h = mul(%m1, %s)
  %y = add(%h, %b)
  return %y, %r0
}
"""

# Each stage as a func of its own: inputs in0.. and outputs out0.. travel in their rank-4
# device shape ([4, 16] -> [1, 4, 1, 16], ANE-IO-RANK4) with a reshape on each side, every
# other value is v0.., weights w0.. (so equal layers give equal programs).
_STAGES = [
    """func f_s00(%in0: fp16[1, 4, 1, 16]) {
  %v0 = reshape(%in0, shape=[4, 16]) : fp16[4, 16]
  %w0 = const(weight="w0") : fp16[16, 16]
  %v1 = matmul(%v0, %w0) : fp16[4, 16]
  %v2 = relu(%v1) : fp16[4, 16]
  %out0 = reshape(%v2, shape=[1, 4, 1, 16]) : fp16[1, 4, 1, 16]
  return %out0
}
""",
    """func f_s01(%in0: fp16[1, 4, 1, 16]) {
  %v0 = reshape(%in0, shape=[4, 16]) : fp16[4, 16]
  %w0 = const(weight="w1") : fp16[16, 16]
  %v1 = matmul(%v0, %w0) : fp16[4, 16]
  %out0 = reshape(%v1, shape=[1, 4, 1, 16]) : fp16[1, 4, 1, 16]
  return %out0
}
""",
    """func f_s02(%in0: fp16[1, 4, 1, 16], %in1: fp16[1, 4, 1, 16]) {
  %v0 = reshape(%in0, shape=[4, 16]) : fp16[4, 16]
  %v1 = reshape(%in1, shape=[4, 16]) : fp16[4, 16]
  %v2 = const(value=0.5) : fp16[]
  %v3 = mul(%v0, %v2) : fp16[4, 16]
  %v4 = add(%v3, %v1) : fp16[4, 16]
  %out0 = reshape(%v4, shape=[1, 4, 1, 16]) : fp16[1, 4, 1, 16]
  return %out0
}
""",
]


def test_stages_of_rank2_values_are_funcs_with_rank4_io_that_compose_to_the_func():
    from anec.ir.graph import Module
    from anec.ir.interp import interpret
    from anec.ir.printer import print_module
    from anec.ir.verifier import verify
    from anec.passes.extract_stage import extract_stage
    from anec.ir.weight_binding import random_weights

    m = parse(_RANK2, "f.ir")
    graph = m.funcs["f"]
    plan = plan_partition(graph, get_target("m4").replace(max_blob_tensors=1))
    # the mul takes an inline scalar: with it a program holds no weight at all (1 minus 1)
    assert plan.describe()[4] == ("    cut after: BLOBFILE budget: with %h (mul) the stage would need 1 weight "
                                  "tensors (at most 0 once %h takes an inline scalar)")
    stages = [extract_stage(graph, plan, k) for k in range(len(plan.stages))]
    for sg, text in zip(stages, _STAGES):
        one = Module()
        one.funcs[sg.name] = sg
        verify(one)
        assert print_module(one) == text
    assert [sg.facts.stage_source.origin for sg in stages] == [
        {"in0": "x", "out0": "r0"}, {"in0": "r0", "out0": "m1"}, {"in0": "m1", "in1": "b", "out0": "y"}]
    assert [{k: c.results[0].name for k, c in sg.facts.stage_source.const_origin.items()} for sg in stages] == [
        {"w0": "w0"}, {"w0": "w1"}, {"v2": "s"}]
    # spans point at the source: the func's, each input's definition, each node's statement;
    # a reshape added for an input or output sits where the value is defined
    assert all(sg.span == graph.span and sg.return_span == graph.return_span for sg in stages)
    assert [[v.span.location for v in sg.inputs] for sg in stages] == [
        ["f.ir:1:8"], ["f.ir:4:3"], ["f.ir:6:3", "f.ir:1:25"]]
    assert [[n.span.location for n in sg.nodes] for sg in stages] == [
        ["f.ir:1:8", "f.ir:2:9", "f.ir:3:9", "f.ir:4:9", "f.ir:4:3"],
        ["f.ir:4:3", "f.ir:5:9", "f.ir:6:9", "f.ir:6:3"],
        ["f.ir:6:3", "f.ir:1:25", "f.ir:7:8", "f.ir:8:8", "f.ir:9:8", "f.ir:9:3"]]
    assert [[r.span.location for n in sg.nodes for r in n.results] for sg in stages] == [  # where defined
        ["f.ir:1:8", "f.ir:2:3", "f.ir:3:3", "f.ir:4:3", "f.ir:4:3"],
        ["f.ir:4:3", "f.ir:5:3", "f.ir:6:3", "f.ir:6:3"],
        ["f.ir:6:3", "f.ir:1:25", "f.ir:7:3", "f.ir:8:3", "f.ir:9:3", "f.ir:9:3"]]
    # run the stages in order, each output fed on as the next stages' input: the func's values
    store = random_weights(m, 0)
    rng = np.random.default_rng(3)
    x = {v.name: rng.standard_normal(v.type.shape).astype(np.float16) for v in graph.inputs}
    env = dict(x)
    for s, sg in zip(plan.stages, stages):
        ins = {f"in{i}": env[v.name].reshape(sg.inputs[i].type.shape) for i, v in enumerate(s.inputs)}
        out = interpret(sg, ins, store, mode="fp16")
        for i, v in enumerate(s.outputs):
            env[v.name] = np.asarray(out[f"out{i}"]).reshape(v.type.shape)
    ref = interpret(graph, x, store, mode="fp16")
    for name, want in ref.items():
        np.testing.assert_array_equal(env[name], np.asarray(want))


def test_plan_sizes_print_in_the_largest_unit_that_keeps_them_at_least_one():
    from anec.ir.func_facts import size_text

    cases = {0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", (1 << 20) - 1: "1024.0 KiB",
             1 << 20: "1.0 MiB", 5 * (1 << 20) + 384: "5.0 MiB", 3 << 30: "3072.0 MiB"}
    assert {n: size_text(n) for n in cases} == cases
