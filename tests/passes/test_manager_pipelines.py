"""The pass registry, the manager (verification, timing, IR dumps) and named pipelines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from anec.diagnostics import AnecError, PassError, VerifyError
from anec.passes import (ALL_PASSES, PASSES, DeadCodeElimination, EmitMil, FuseCasts, Pass,
                         PassContext, get_pass, run_pipeline)
from anec.passes.pipelines import (CLEANUP, DEFAULT, OPTIMIZE, PIPELINES, check_pass_names,
                                   get_pipeline, parse_pass_list)

from .passes_util import CAST_CHAIN as TEXT
from .passes_util import parse_func, parse_module


def test_registry_names_are_unique_and_documented():
    assert len(PASSES) == len(ALL_PASSES) == 10
    assert list(PASSES) == ["dce", "fuse-casts", "weights-as-inputs", "select-native", "range-safe", "annotate-sram", "legalize",
                            "partition", "quantize-activations", "emit-mil"]
    for p in ALL_PASSES:
        doc = p.documentation()
        assert "Before:" in doc and "After" in doc, p.name
        assert p.summary() and p.summary() == doc.splitlines()[0]
        assert p.__dataclass_params__.frozen


def test_get_pass_suggests_a_name():
    assert get_pass("dce") is DeadCodeElimination
    with pytest.raises(AnecError) as info:
        get_pass("fuse-cast")
    assert info.value.hint == "did you mean 'fuse-casts'?"


def test_pipelines_are_tuples_of_instances_in_documented_order():
    assert [p.name for p in DEFAULT] == ["dce", "fuse-casts", "dce", "select-native", "range-safe", "annotate-sram",
                                        "legalize", "partition", "emit-mil"]
    assert [p.name for p in OPTIMIZE] == [p.name for p in DEFAULT[:-1]]
    assert [p.name for p in CLEANUP] == ["dce", "fuse-casts", "dce"]
    assert isinstance(DEFAULT[-1], EmitMil)
    assert get_pipeline("default") is DEFAULT and set(PIPELINES) >= {"default", "optimize"}
    with pytest.raises(AnecError) as info:
        get_pipeline("defualt")
    assert "did you mean 'default'" in info.value.hint


def test_parse_pass_list():
    passes = parse_pass_list("dce, fuse-casts,dce")
    assert [p.name for p in passes] == ["dce", "fuse-casts", "dce"]
    assert isinstance(passes[1], FuseCasts)
    for bad in ("", "dce,,dce", "dce,legalise"):
        with pytest.raises(AnecError):
            parse_pass_list(bad)
    assert check_pass_names(["all", "dce"]) == {"all", "dce"}
    with pytest.raises(AnecError) as info:
        check_pass_names(["annotate_sram"])
    assert "annotate-sram" in info.value.hint


def test_manager_times_each_pass_and_prints_ir_after():
    m = parse_module(TEXT)
    ctx = PassContext.default()
    ctx.print_ir_after = {"fuse-casts"}
    run_pipeline(m, CLEANUP, ctx)
    assert [(f, p) for f, p, _ in ctx.timings] == [("f", "dce"), ("f", "fuse-casts"), ("f", "dce")]
    assert all(t >= 0 for _, _, t in ctx.timings)
    assert len(ctx.printed) == 1
    assert ctx.printed[0].startswith("// ----- IR after fuse-casts (func f) -----\n")
    assert "%y = relu(%x)" in ctx.printed[0]
    assert ctx.module is m
    ctx.print_ir_after = {"all"}
    run_pipeline(parse_module(TEXT), CLEANUP, ctx)
    assert len(ctx.printed) == 4


@dataclass(frozen=True)
class _BreakUses(Pass):
    """A broken pass: it edits operands without fixing use lists.

    Before: anything. After: an invalid graph.
    """

    name: ClassVar[str] = "break-uses"

    def run(self, graph, ctx) -> None:
        node = graph.nodes[-1]
        node.operands = [graph.inputs[0]]


def test_manager_names_the_pass_that_broke_the_ir():
    g = parse_func(TEXT)
    with pytest.raises(PassError) as info:
        run_pipeline(g, (DeadCodeElimination(), _BreakUses()), PassContext.default())
    assert "pass 'break-uses' left func 'f' invalid" in info.value.message
    assert "use list" in info.value.message


def test_manager_verifies_the_input_first():
    g = parse_func(TEXT)
    g.set_outputs([])
    with pytest.raises(VerifyError):
        run_pipeline(g, (DeadCodeElimination(),), PassContext.default())


def test_pass_context_default():
    ctx = PassContext.default("m1", host_casts=True)
    assert ctx.target.name == "m1" and ctx.option("host_casts") is True
    assert ctx.option("pack_weights", False) is False and ctx.weights is None
    with pytest.raises(AnecError):
        PassContext.default("m9")


def test_rewrite_driver_stops_rules_that_never_settle():
    from anec.passes.rewrite import Rewriter, rewrite_greedily

    g = parse_func(TEXT)

    def flip(node, rw):  # relu(x) -> relu(x): a rule that always matches
        return rw.op("relu", node.operands[0])

    with pytest.raises(PassError) as info:
        rewrite_greedily(g, {"relu": (flip,)}, Rewriter(g, PassContext.default(), "flip"))
    assert "did not reach a fixpoint" in info.value.message


def test_pass_names_hints_for_case_underscores_and_pipelines():
    import anec.passes as passes

    assert passes.parse_pass_list is parse_pass_list  # the documented Python entry point
    assert passes.get_pipeline is get_pipeline
    for bad, hint in (("DCE", "did you mean 'dce'?"), ("Fuse_Casts", "did you mean 'fuse-casts'?"),
                      ("default", "'default' is a pipeline, not a pass: use --pipeline default"),
                      ("legalise", "did you mean 'legalize'?")):
        with pytest.raises(AnecError) as info:
            passes.parse_pass_list(f"dce,{bad}")
        assert info.value.message == f"unknown pass '{bad}'"
        assert info.value.hint.startswith(hint), info.value.hint


def test_print_ir_after_names_are_checked():
    ctx = PassContext.default()
    ctx.print_ir_after = {"legalise"}
    with pytest.raises(AnecError) as info:
        run_pipeline(parse_module(TEXT), CLEANUP, ctx)
    assert "unknown pass 'legalise' in print_ir_after" in info.value.message
    assert info.value.hint == "did you mean 'legalize'?"
    ctx.print_ir_after = {"break-uses"}  # a pass of this pipeline, not of the registry
    with pytest.raises(PassError):
        run_pipeline(parse_func(TEXT), (_BreakUses(),), ctx)
