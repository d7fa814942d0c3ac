"""Properties over random programs: every pass keeps the IR valid, and the pipeline up to
emission keeps the outputs (fp32 interpreter; tolerance covers the gelu approximation and
the fp16 rounding of 1/N)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.diagnostics import ConstraintError
from anec.ir.interp import interpret, random_inputs
from anec.ir.parser import parse
from anec.ir.printer import print_graph
from anec.ir.verifier import verify
from anec.passes import PassContext, run_pipeline
from anec.ir.ops import NOT_ON_ANE, OPS
from anec.passes.legalize import legalize_graph
from anec.passes.pipelines import CLEANUP, OPTIMIZE
from anec.passes.annotate_sram import AnnotateSram
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

from tests.ir.strategies import graphs  # tests/ is on sys.path (rootdir-relative packages)
from .ane_strategies import ane_programs
from .passes_util import compare

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check_legal(graph) -> None:
    assert not {n.op for n in graph.nodes} & NOT_ON_ANE
    for n in graph.nodes:
        low = OPS[n.op].lowering
        assert not set(n.optional) & set(getattr(low, "rejected", {})), n


@SETTINGS
@given(ane_programs(), st.sampled_from(["m1", "m4", "m5"]), st.integers(0, 3))
def test_pipeline_keeps_outputs(program, target, seed):
    graph, exact_gelu = program
    before = graph.clone()
    weights = random_weights(graph, seed)
    ctx = PassContext.default(target, weights=weights, host_casts=True)
    run_pipeline(graph, OPTIMIZE, ctx)  # verifies after every pass
    _check_legal(graph)
    assert len(graph.outputs) == len(before.outputs)
    tol = 1e-2 if exact_gelu else 2e-3
    compare(before, graph, weights, seed=seed, rtol=tol, atol=tol)


@SETTINGS
@given(ane_programs(wide_output=True), st.integers(0, 3))
def test_chunking_under_a_tight_channel_limit(program, seed):
    graph, exact_gelu = program
    before = graph.clone()
    weights = random_weights(graph, seed)
    tight = get_target("m4").replace(max_conv_out_channels=8)
    ctx = PassContext(target=tight, weights=weights)
    try:
        run_pipeline(graph, OPTIMIZE, ctx)
    except ConstraintError as e:
        # only a too-wide conv used inside the program may be refused, with its span
        assert e.constraint == "ANE-CONV-CHANNELS" and e.span is not None and e.hint
        return
    _check_legal(graph)
    assert all(n.result.type.shape[1] <= 8 for n in graph.nodes if n.op == "conv1x1")
    assert graph.facts.logical_outputs[0]["pieces"][0].endswith("__c0")
    tol = 1e-2 if exact_gelu else 2e-3
    compare(before, graph, weights, seed=seed, rtol=tol, atol=tol)


@settings(SETTINGS, max_examples=60)
@given(graphs(max_steps=10))
def test_every_pass_keeps_arbitrary_graphs_valid(graph):
    """On any valid func (all ops, dtypes, odd names): passes keep it valid; cleanup is exact.

    Exactness is checked in the interpreter's fp16 mode, the program's own semantics (every
    fp16 value rounded as stored). The fp32 mode deliberately skips rounding intermediate
    fp16 values, so there ``cast(cast(x16, fp32), fp16)`` is a rounding that folding removes.

    The func goes through its text (printed, parsed as ``generated.ir``), so every node has
    a location, and there is no escape hatch: the strategy makes weight views that random
    weights satisfy, so any exception, located or not, fails the test.
    """
    graph = parse(print_graph(graph), "generated.ir").func()
    before = graph.clone()
    ctx = PassContext.default()
    run_pipeline(graph, (*CLEANUP, AnnotateSram()), ctx)
    legalize_graph(graph, ctx, collect=True)
    verify(graph)
    weights = random_weights(before, 0)
    feeds = random_inputs(before, 0)
    want = interpret(before, feeds, weights, mode="fp16")
    cleaned = before.clone()
    run_pipeline(cleaned, CLEANUP, PassContext.default(weights=weights))
    got = interpret(cleaned, feeds, weights, mode="fp16")
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
