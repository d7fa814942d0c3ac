"""Partitioning aligned to repeated layers (``plan_partition(..., align=True)``, asked for by
the ``share_programs`` option): cuts fall on layer boundaries and the cuts inside one
layer are copied to every layer, so repeated layers become structurally identical stages.

The func: a chain of layers of four 1x1 convs each (four weights) on a target whose
programs hold 15 BLOBFILE tensors (16, less one for the inline scalar), so the unaligned
plan's stages hold 3.75 layers and start at a different place inside a layer each time.
"""

from __future__ import annotations

import pytest

from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.passes.partition_search import plan_partition, signatures
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

WEIGHTS_PER_LAYER = 4
NODES_PER_LAYER = 7  # relu, four convs, mul, add


def layers(n: int) -> str:
    lines = ["func f(%x: fp16[1, 8, 1, 16]) {", "  %k = const(value=0.25) : fp16[]"]
    prev = "%x"
    for i in range(n):
        lines.append(f"  %a{i} = relu({prev})")
        h = f"%a{i}"
        for j in range(WEIGHTS_PER_LAYER):
            lines.append(f'  %w{i}_{j} = const(weight="l{i}.w{j}") : fp16[8, 8, 1, 1]')
            lines.append(f"  %c{i}_{j} = conv1x1({h}, %w{i}_{j})")
            h = f"%c{i}_{j}"
        lines += [f"  %s{i} = mul({h}, %k)", f"  %h{i} = add({prev}, %s{i})"]
        prev = f"%h{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


TARGET = get_target("m4").replace(max_blob_tensors=16)


def legalized(n: int, share: bool):
    m = parse(layers(n), "layers.ir")
    r = compile_module(m, weights=random_weights(m, 0), target=TARGET,
                       share_programs="always" if share else "never")
    return r.module.funcs["f"], r


def distinct_mil(r) -> int:
    return len({e["mil_sha256"] for e in r.artifacts["f"].manifest.document["stages"]})


@pytest.mark.parametrize("n", [12, 24, 48])
def test_aligned_cuts_fall_on_layer_boundaries_and_repeat(n):
    graph, r = legalized(n, share=True)
    plan = plan_partition(graph, TARGET, align=True)
    items = plan.items
    period = NODES_PER_LAYER
    assert len(items) == n * period
    stages = plan.stages
    assert all(s.start % period == 0 for s in stages)  # every stage starts a layer
    full = [s for s in stages if s.end - s.start == stages[0].end - stages[0].start]
    assert len(full) >= len(stages) - 1
    # structurally identical, what enters a stage from before it seen as a stage input
    assert len({tuple(signatures(items, s.start, s.start, s.end)) for s in full}) == 1
    assert all(len(s.weights) <= s.blob_cap for s in stages)
    assert distinct_mil(r) <= 2


def test_without_alignment_the_stages_of_a_deeper_func_differ_more():
    # the claim alignment makes: distinct stage MIL does not grow with depth
    aligned = {n: distinct_mil(legalized(n, share=True)[1]) for n in (24, 48)}
    assert aligned[24] == aligned[48]
    plain = {n: distinct_mil(legalized(n, share=False)[1]) for n in (24, 48)}
    assert plain[24] > aligned[24] or plain[48] > aligned[48]


def test_alignment_that_would_not_reduce_distinct_stages_keeps_the_unaligned_plan():
    # one layer: its four chained convs repeat (period 1), but cutting at each is no gain
    m = parse(layers(1), "one.ir")
    r = compile_module(m, weights=random_weights(m, 0), target=get_target("m4").replace(max_blob_tensors=3))
    graph = r.module.funcs["f"]
    plain, aligned = plan_partition(graph, r.target), plan_partition(graph, r.target, align=True)
    assert [(s.start, s.end) for s in aligned.stages] == [(s.start, s.end) for s in plain.stages]
