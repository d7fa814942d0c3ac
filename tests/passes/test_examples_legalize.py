"""Every example legalizes on every target, keeps its outputs, and reaches MIL emission."""

from __future__ import annotations

from pathlib import Path

import pytest

from anec.ir.ops import NOT_ON_ANE
from anec.ir.parser import parse_file
from anec.passes import PassContext, run_pipeline
from anec.passes.pipelines import DEFAULT, OPTIMIZE
from anec.targets import TARGETS
from anec.ir.weight_binding import random_weights

from .passes_util import compare

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_legalizes_on_m4_with_same_outputs(path):
    module = parse_file(path)
    before = module.clone()
    weights = random_weights(module, 0)
    ctx = PassContext.default("m4", weights=weights)
    run_pipeline(module, OPTIMIZE, ctx)
    for name, g in module.funcs.items():
        ops = {n.op for n in g.nodes}
        assert not ops & NOT_ON_ANE, (name, ops & NOT_ON_ANE)
        assert not any("bias" in n.optional for n in g.nodes)
        assert g.output_names() == before.funcs[name].output_names()
        assert g.facts.sram is not None
        compare(before.funcs[name], g, weights, seed=1, rtol=2e-3, atol=2e-3)
    assert all(r["location"].startswith(str(path)) for r in ctx.rewrites)


@pytest.mark.parametrize("target", list(TARGETS))
def test_examples_compile_to_mil_on_every_target(target):
    for path in EXAMPLES:
        module = parse_file(path)
        ctx = PassContext.default(target, weights=random_weights(module, 0), host_casts=True)
        run_pipeline(module, DEFAULT, ctx)
        assert set(ctx.artifacts) == set(module.funcs), path
