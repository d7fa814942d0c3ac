"""Partitioning: a func over a per-program budget is cut into legal stages whose composition
computes what the func computes (the planner alone; tests/runtime/test_rt_pipeline.py runs
pipelines on the sim)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.compiler import compile_module
from anec.diagnostics import ConstraintError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.passes.extract_stage import extract_stage
from anec.passes.partition_search import blob_cap_of, plan_partition
from anec.targets import get_target
from anec.ir.weight_binding import random_weights

C, S = 8, 16
T = f"fp16[1, {C}, 1, {S}]"


def chain(n: int, width_at: dict[int, int] | None = None) -> str:
    """n conv+relu layers; layer i may widen its output to width_at[i] channels (and back)."""
    width_at = width_at or {}
    lines = [f"func f(%x: {T}) {{"]
    prev, c = "%x", C
    for i in range(n):
        co = width_at.get(i, C)
        lines.append(f'  %w{i} = const(weight="l{i}.w") : fp16[{co}, {c}, 1, 1]')
        lines.append(f"  %c{i} = conv1x1({prev}, %w{i})")
        lines.append(f"  %h{i} = relu(%c{i})")
        prev, c = f"%h{i}", co
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


def unet(n: int) -> str:
    """A down path of n convs, then an up path adding the skip from layer i into layer n-1-i."""
    lines = [f"func u(%x: {T}) {{"]
    prev = "%x"
    for i in range(n):
        lines.append(f'  %dw{i} = const(weight="d{i}.w") : fp16[{C}, {C}, 1, 1]')
        lines.append(f"  %d{i} = conv1x1({prev}, %dw{i})")
        prev = f"%d{i}"
    for i in range(n):
        lines.append(f'  %uw{i} = const(weight="u{i}.w") : fp16[{C}, {C}, 1, 1]')
        lines.append(f"  %uc{i} = conv1x1({prev}, %uw{i})")
        lines.append(f"  %u{i} = add(%uc{i}, %d{n - 1 - i})")
        prev = f"%u{i}"
    lines.append(f"  return {prev}, %d{n // 2}\n}}\n")
    return "\n".join(lines)


def target(blobs: int, sram: int | None = None):
    t = get_target("m4").replace(max_blob_tensors=blobs)
    return t.replace(sram_bytes=sram) if sram is not None else t


def run_plan(graph, plan, store, inputs):
    """Interpret every stage in order, feeding crossing values: the pipeline's semantics."""
    env = dict(inputs)
    for k, s in enumerate(plan.stages):
        sg = extract_stage(graph, plan, k)
        ins = {f"in{i}": np.asarray(env[v.name]).reshape(sg.inputs[i].type.shape) for i, v in enumerate(s.inputs)}
        out = interpret(sg, ins, store, mode="fp16")
        for i, v in enumerate(s.outputs):
            env[v.name] = np.asarray(out[f"out{i}"]).reshape(v.type.shape)
    return {v.name: env[v.name] for v in graph.outputs}


def check_plan(graph, plan, tgt, store):
    """Every stage within the BLOBFILE budget, wired to earlier stages only, composing to the func."""
    defined = {id(v) for v in graph.inputs}
    for k, s in enumerate(plan.stages):
        sg = extract_stage(graph, plan, k)
        weights = {n.attrs["weight"] for n in sg.nodes if n.op == "const" and "weight" in n.attrs}
        count, cap = blob_cap_of([n for n in sg.nodes if n.op != "const"], tgt)
        assert len(weights) <= count <= cap == s.blob_cap, (k, count, cap)  # raw graphs: no CSE
        assert all(id(v) in defined for v in s.inputs), k
        assert all(v.type.rank == 4 for v in [*sg.inputs, *sg.outputs])
        defined |= {id(r) for x in plan.items[s.start:s.end] for r in x.results}
    assert plan.stages[0].start == 0 and plan.stages[-1].end == len(plan.items)
    assert all(a.end == b.start for a, b in zip(plan.stages, plan.stages[1:]))
    x = {v.name: np.random.default_rng(1).standard_normal(v.type.shape).astype(np.float16) for v in graph.inputs}
    ref = interpret(graph, x, store, mode="fp16")  # every value at its declared dtype, as on the device
    got = run_plan(graph, plan, store, x)
    for name in ref:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(ref[name]))


def test_a_func_that_fits_one_program_is_not_cut():
    m = parse(chain(16), "c.ir")
    assert plan_partition(m.funcs["f"], target(16)) is None
    res = compile_module(m, random_seed=0)
    assert type(res.artifacts["f"]).__name__ == "Artifact"  # today's layout exactly


def test_a_single_node_over_the_sram_is_one_program_with_its_spill_risk_not_a_one_stage_cut():
    """No cut can lower a lone node's peak: it compiles as one program, the SRAM report names the risk."""
    m = parse("func s(%x: fp16[1, 512, 1, 512]) {\n  %y = relu(%x) : fp16[1, 512, 1, 512]\n  return %y\n}\n", "s.ir")
    tgt = target(16, sram=64 * 1024)
    assert plan_partition(m.funcs["s"], tgt) is None
    forced = plan_partition(m.funcs["s"], tgt, force=True)
    assert len(forced.stages) == 1 and forced.stages[0].peak_sram > 64 * 1024 and forced.constraints == []


@pytest.mark.parametrize("n,budget", [(40, 16), (17, 16), (100, 16), (100, 3), (9, 2)])
def test_chains_use_the_fewest_stages(n, budget):
    m = parse(chain(n), "c.ir")
    g = m.funcs["f"]
    plan = plan_partition(g, target(budget))
    assert len(plan.stages) == math.ceil(n / budget)
    check_plan(g, plan, target(budget), random_weights(m, 0))


def test_among_plans_with_as_few_stages_the_cheapest_cut_wins():
    # 6 layers, budget 4: 2 stages in any case; layers 1..3 are 64 channels wide, so a cut
    # after layer 0, 4 or 5 passes 8 channels and a cut inside the wide run 64
    text = chain(6, {1: 64, 2: 64})
    m = parse(text, "c.ir")
    g = m.funcs["f"]
    plan = plan_partition(g, target(4))
    assert len(plan.stages) == 2
    cut_value = plan.stages[0].outputs[0]
    assert cut_value.type.shape[1] == C, cut_value
    assert plan.crossing_bytes == C * S * 2
    assert "cheaper cut" in plan.stages[0].reason or "BLOBFILE budget" in plan.stages[0].reason
    check_plan(g, plan, target(4), random_weights(m, 0))


@pytest.mark.parametrize("n,budget", [(8, 3), (12, 5), (30, 16)])
def test_unet_skips_cross_many_stages(n, budget):
    m = parse(unet(n), "u.ir")
    g = m.funcs["u"]
    plan = plan_partition(g, target(budget))
    assert len(plan.stages) == math.ceil(2 * n / budget)
    # a skip from the first layers is read by the last stage: it crosses every cut in between
    assert any(v.name == "d0" for v in plan.stages[-1].inputs)
    check_plan(g, plan, target(budget), random_weights(m, 0))


def test_a_value_used_by_many_later_stages_is_an_input_of_each():
    lines = [f"func f(%x: {T}) {{", f'  %w = const(weight="w") : fp16[{C}, {C}, 1, 1]', "  %b = conv1x1(%x, %w)"]
    prev = "%b"
    for i in range(10):
        lines += [f'  %w{i} = const(weight="l{i}.w") : fp16[{C}, {C}, 1, 1]', f"  %c{i} = conv1x1({prev}, %w{i})",
                  f"  %h{i} = add(%c{i}, %b)"]
        prev = f"%h{i}"
    lines.append(f"  return {prev}, %b\n}}\n")
    m = parse("\n".join(lines), "f.ir")
    g = m.funcs["f"]
    plan = plan_partition(g, target(3))
    assert all(any(v.name == "b" for v in s.inputs) for s in plan.stages[1:])
    assert any(v.name == "b" for v in plan.stages[0].outputs)
    check_plan(g, plan, target(3), random_weights(m, 0))


@pytest.mark.constraint("ANE-BLOB-BUDGET")
def test_a_node_that_fits_no_program_is_a_located_error(tmp_path):
    text = f"""func f(%x: {T}) {{
  %w = const(weight="w") : fp16[{C}, {C}, 1, 1]
  %b = const(weight="b") : fp16[1, {C}, 1, 1]
  %y = conv1x1(%x, %w, bias=%b)
  %s = const(value=2.0) : fp16[]
  %z = mul(%y, %s)
  return %z
}}
"""
    m = parse(text, "f.ir")
    g = m.funcs["f"]
    with pytest.raises(ConstraintError) as ei:
        plan_partition(g, target(1))
    e = ei.value
    assert e.constraint == "ANE-BLOB-BUDGET" and "alone reads 2 BLOBFILE weight tensors" in e.message
    assert e.span is not None and e.span.location.startswith("f.ir:4:")
    assert "--weights-as-inputs" in e.hint
    # the compiler first splits the bias into an add of its own, so there the func fits three
    # programs; with no BLOBFILE tensor allowed at all the conv itself fits none
    assert len(compile_module(m, random_seed=0, target=target(1)).artifacts["f"].stages) == 3
    with pytest.raises(ConstraintError) as ei:
        compile_module(m, random_seed=0, target=target(0), out_dir=tmp_path / "out")
    assert ei.value.constraint == "ANE-BLOB-BUDGET" and ei.value.span.location.startswith("f.ir:4:")
    assert not (tmp_path / "out").exists()  # nothing written


def test_cuts_never_pass_integer_or_fp32_on_fp16_only_targets():
    # an fp32 value lives across three layers: on m1 (no fp32 I/O) no cut may fall inside
    lines = [f"func f(%x: {T}) {{", "  %x32 = cast(%x, dtype=fp32)"]
    prev = "%x"
    for i in range(6):
        lines += [f'  %w{i} = const(weight="l{i}.w") : fp16[{C}, {C}, 1, 1]', f"  %c{i} = conv1x1({prev}, %w{i})"]
        prev = f"%c{i}"
        if i == 2:
            lines.append(f"  %p = cast({prev}, dtype=fp32)\n  %q = add(%p, %x32)\n  %r = cast(%q, dtype=fp16)")
            prev = "%r"
    lines.append(f"  return {prev}\n}}\n")
    m = parse("\n".join(lines), "f.ir")
    g = m.funcs["f"]
    m1 = get_target("m1").replace(max_blob_tensors=3)
    plan = plan_partition(g, m1)
    for s in plan.stages:
        assert all(v.type.dtype.value != "fp32" for v in s.inputs), s
    assert len(plan.stages) == 2
    check_plan(g, plan, m1, random_weights(m, 0))
    # with fp32 I/O the same func may cut anywhere
    assert plan_partition(g, get_target("m4").replace(max_blob_tensors=3)) is not None


def test_sram_splits_a_stage_until_each_part_fits_or_is_one_node():
    text = chain(6, {2: 256})  # a 256-channel activation makes layers 2..3 heavy
    m = parse(text, "c.ir")
    g = m.funcs["f"]
    plan = plan_partition(g, target(16, sram=12 * 1024))
    assert len(plan.stages) > 1
    assert any("SRAM" in s.reason for s in plan.stages)
    for s in plan.stages:
        assert s.peak_sram <= 12 * 1024 or s.end - s.start == 1, s  # every cut of a chain is allowed
    check_plan(g, plan, target(16, sram=12 * 1024), random_weights(m, 0))


@st.composite
def dags(draw):
    """Random DAGs over [1, C, 1, S] fp16 values: convs (weights sometimes shared), skip adds,
    unary ops, inline-scalar muls, several outputs."""
    n = draw(st.integers(3, 24))
    lines = [f"func g(%x: {T}) {{"]
    vals = ["%x"]
    keys = 0
    for i in range(n):
        kind = draw(st.sampled_from(["conv", "conv", "add", "relu", "tanh", "scale"]))
        a = draw(st.sampled_from(vals[-6:]))
        if kind == "conv":
            k = draw(st.integers(0, keys)) if keys and draw(st.booleans()) else keys
            keys = max(keys, k + 1)
            lines.append(f'  %w{i} = const(weight="k{k}.w") : fp16[{C}, {C}, 1, 1]')
            lines.append(f"  %v{i} = conv1x1({a}, %w{i})")
        elif kind == "add":
            b = draw(st.sampled_from(vals))
            lines.append(f"  %v{i} = add({a}, {b})")
        elif kind == "scale":
            lines.append(f"  %s{i} = const(value=0.5) : fp16[]\n  %v{i} = mul({a}, %s{i})")
        else:
            lines.append(f"  %v{i} = {kind}({a})")
        vals.append(f"%v{i}")
    outs = sorted(set([vals[-1]] + draw(st.lists(st.sampled_from(vals[1:]), max_size=2))))
    lines.append(f"  return {', '.join(outs)}\n}}\n")
    return "\n".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=dags(), budget=st.integers(2, 16), sram=st.sampled_from([None, 2048, 4096]))
def test_random_dags_partition_into_legal_stages_that_compose_to_the_func(text, budget, sram):
    m = parse(text, "g.ir")
    g = m.funcs["g"]
    tgt = target(budget, sram)
    plan = plan_partition(g, tgt, force=True)
    check_plan(g, plan, tgt, random_weights(m, 0))
    # never more stages than one per weight-bearing run the budget forces, plus SRAM splits
    count, _ = blob_cap_of(plan.items, tgt)
    if sram is None:
        assert len(plan.stages) <= max(1, count)


def test_a_func_input_counts_only_between_its_first_and_last_use():
    """A large input read only by the last layers (a KV cache) moves nothing at earlier cuts."""
    lines = [f"func f(%x: {T}, %cache: fp16[1, {C}, 64, {S}]) {{"]
    prev = "%x"
    for i in range(40):
        lines += [f'  %w{i} = const(weight="l{i}.w") : fp16[{C}, {C}, 1, 1]', f"  %c{i} = conv1x1({prev}, %w{i})"]
        prev = f"%c{i}"
    lines += ["  %m = reduce_sum(%cache, axes=[2], keep_dims=true)", f"  %y = add({prev}, %m)", "  return %y\n}\n"]
    m = parse("\n".join(lines), "c.ir")
    plan = plan_partition(m.funcs["f"], target(16))
    assert len(plan.stages) == 3
    assert plan.crossing_bytes == 2 * C * S * 2  # two cuts, one [1, C, 1, S] fp16 activation each
    check_plan(m.funcs["f"], plan, target(16), random_weights(m, 0))



@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=dags(), budget=st.integers(2, 16), sram=st.sampled_from([None, 2048, 4096, 8192]))
def test_the_sram_report_peak_bounds_the_one_program_peak(text, budget, sram):
    """legalize passes the SRAM report's peak to the planner, which then skips its own
    one-program estimate: the bound holds, and the plan is the one computed without it."""
    from anec.passes.annotate_sram import sram_report

    m = parse(text, "g.ir")
    g = m.funcs["g"]
    tgt = target(budget, sram)
    peak = sram_report(g, tgt)["peak_bytes"]
    one = plan_partition(g, target(64, 1 << 40), force=True)
    assert len(one.stages) == 1 and one.stages[0].peak_sram <= peak
    plain, bounded = plan_partition(g, tgt), plan_partition(g, tgt, peak_bound=peak)
    assert (plain is None) == (bounded is None)
    if plain is not None:
        assert plain.describe() == bounded.describe()
