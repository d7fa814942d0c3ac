"""Details of the small passes and the pass manager that the end-to-end suites do not pin:
what weights-as-inputs records and names, the fp16 input of an fp32 weight, the manager's
timings, and the wording of the pass-name errors and the pass listing."""

from __future__ import annotations

import pytest

from anec.diagnostics import AnecError
from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.passes import PassContext, WeightsAsInputs
from anec.passes.listing import format_passes
from anec.passes.manager import run_pipeline
from anec.passes.pipelines import (PIPELINES, check_pass_names, get_pipeline, parse_pass_list,
                                   pass_name_hint)
from anec.passes.registry import PASSES
from anec.targets import get_target

VIEWS = """\
func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="a.w", perm=[1, 0, 2, 3], slice=[0, 0, 4]) : fp16[4, 4, 1, 1]
  %3 = const(weight="b.w") : fp16[1, 4, 1, 8]
  %y = conv1x1(%x, %w)
  %z = add(%y, %3)
  return %z
}
"""


def test_an_input_records_the_view_its_const_read_and_keeps_earlier_entries():
    m = parse(VIEWS, "v.ir")
    g = m.funcs["f"]
    WeightsAsInputs(keys=("b.*",)).run(g, PassContext.default())
    WeightsAsInputs(keys=("a.*",)).run(g, PassContext.default())
    assert g.facts.weight_inputs == [
        {"key": "b.w", "input": "w_3", "dtype": "fp16", "shape": [1, 4, 1, 8], "perm": None, "slice": None},
        {"key": "a.w", "input": "w", "dtype": "fp16", "shape": [4, 4, 1, 1], "perm": [1, 0, 2, 3],
         "slice": [0, 0, 4]},
    ]
    assert [v.name for v in g.inputs] == ["x", "w_3", "w"]  # "3" is no MIL identifier: prefixed


def test_a_prefixed_input_name_that_is_taken_gets_a_fresh_one():
    text = VIEWS.replace("func f(%x: fp16[1, 4, 1, 8])", "func f(%x: fp16[1, 4, 1, 8], %w_3: fp16[1, 4, 1, 8])")
    g = parse(text, "v.ir").funcs["f"]
    WeightsAsInputs(keys=("b.*",)).run(g, PassContext.default())
    names = [v.name for v in g.inputs]
    assert names[:2] == ["x", "w_3"] and len(names) == 3 and names[2].startswith("w_3") and names[2] != "w_3"
    assert g.facts.weight_inputs[0]["input"] == names[2]


def test_an_input_takes_the_const_name_or_a_fresh_one_and_its_span():
    text = VIEWS.replace("%3 = const", "%w_3 = const").replace("add(%y, %3)", "add(%y, %w_3)")
    text = text.replace("func f(%x: fp16[1, 4, 1, 8])", "func f(%x: fp16[1, 4, 1, 8], %w_9: fp16[1, 4, 1, 8])")
    m = parse(text, "v.ir")
    g = m.funcs["f"]
    WeightsAsInputs().run(g, PassContext.default())
    names = [v.name for v in g.inputs]
    assert names[:3] == ["x", "w_9", "w"] and names[3] == "w_3"  # the name it had, freed from the const
    w = g.inputs[2]
    assert w.span is not None and (w.span.line, w.span.col) == (2, 8)  # the const's op name
    assert len(set(names)) == len(names)


FP32 = """\
func f(%x: fp32[1, 4, 1, 8]) {
  %w = const(weight="a.w") : fp32[1, 4, 1, 8]
  %y = add(%x, %w)
  return %y
}
"""


@pytest.mark.parametrize("target,io_dtype,cast", [("m4", "fp32", False), ("m2", "fp16", True)])
def test_an_fp32_weight_comes_in_as_fp16_where_fp32_io_is_missing(target, io_dtype, cast):
    m = parse(FP32, "f.ir")
    g = m.funcs["f"]
    WeightsAsInputs().run(g, PassContext.default(get_target(target)))
    assert g.facts.weight_inputs[0]["dtype"] == io_dtype
    assert g.inputs[1].type.dtype.value == io_dtype
    text = print_module(m)
    if cast:
        assert "%w_f32 = cast(%w, dtype=fp32)" in text
        node = next(n for n in g.nodes if n.op == "cast")
        assert node.span is not None and node.span.line == 2
        assert [n.op for n in g.nodes] == ["cast", "add"]
    else:
        assert "cast" not in text
    # a target without the attribute (e.g. a duck-typed one) is taken to allow fp32 I/O
    g2 = parse(FP32, "f.ir").funcs["f"]
    ctx = PassContext.default()
    object.__setattr__(ctx, "target", object())
    WeightsAsInputs().run(g2, ctx)
    assert g2.inputs[1].type.dtype.value == "fp32"


def test_the_manager_times_each_pass_and_adds_up_its_verification():
    m = parse(VIEWS, "v.ir")
    ctx = PassContext.default()
    ctx.verify_seconds = 5.0
    run_pipeline(m, get_pipeline("cleanup"), ctx)
    assert ctx.verify_seconds > 5.0  # added to, never reset
    assert [name for _, name, _ in ctx.timings] == [p.name for p in PIPELINES["cleanup"]]
    assert all(0.0 <= s < 5.0 for _, _, s in ctx.timings)
    assert ctx.verify_seconds < 10.0


def test_unknown_pipelines_and_passes_say_what_exists():
    with pytest.raises(AnecError) as e:
        get_pipeline("nonsense")
    assert e.value.args[0] == "unknown pipeline 'nonsense'"
    assert e.value.hint == f"pipelines: {', '.join(PIPELINES)}"
    with pytest.raises(AnecError) as e:
        parse_pass_list("dce,,dce")
    assert e.value.args[0] == "invalid pass list 'dce,,dce'"
    assert e.value.hint == "write pass names separated by commas, e.g. dce,fuse-casts,dce"
    with pytest.raises(AnecError) as e:
        check_pass_names(["dce", "zzzzzz"])
    assert e.value.args[0] == "unknown pass 'zzzzzz'"
    assert e.value.hint == f"passes: {', '.join([*PASSES, 'all'])}"
    with pytest.raises(AnecError) as e:
        check_pass_names(["Al_l"])
    assert e.value.hint == "did you mean 'all'?"  # "all" is offered beside the passes
    assert check_pass_names([" all ", "dce"]) == {"all", "dce"}


def test_pass_name_hints():
    assert pass_name_hint("Fuse_Casts") == "did you mean 'fuse-casts'? (pass names are lowercase, with '-')"
    name = next(iter(PIPELINES))
    assert pass_name_hint(name) == (f"'{name}' is a pipeline, not a pass: use --pipeline {name} "
                                    f"(passes: {', '.join(p.name for p in PIPELINES[name])})")
    assert pass_name_hint("qqqqqq") == f"passes: {', '.join(PASSES)}"
    assert pass_name_hint("qqqqqq", ("all",)).endswith(", all")


def test_the_pass_listing():
    text = format_passes()
    lines = text.split("\n")
    assert lines[0] == "passes:" and text.endswith("\n") and not text.endswith("\n\n")
    assert "pipelines:" in lines and lines[lines.index("pipelines:") - 1] == ""
    for p in PASSES:
        assert any(line.startswith(f"  {p} ") or line.startswith(f"  {p}  ") for line in lines[1:]), p
    md = format_passes(markdown=True)
    section = md[md.index("## Pipelines"):]
    assert "`default` is what `anec compile` runs." in section and "``default``" not in section


def test_a_misspelt_print_ir_after_name_is_refused_with_the_passes_and_all():
    m = parse(VIEWS, "v.ir")
    ctx = PassContext.default()
    ctx.print_ir_after = {"dce", "fuse_casts"}
    with pytest.raises(AnecError) as e:
        run_pipeline(m, get_pipeline("cleanup"), ctx)
    assert e.value.args[0] == "unknown pass 'fuse_casts' in print_ir_after"
    assert e.value.hint == "did you mean 'fuse-casts'? (pass names are lowercase, with '-')"
    ctx.print_ir_after = {"al"}
    with pytest.raises(AnecError) as e:
        run_pipeline(m, get_pipeline("cleanup"), ctx)
    assert e.value.hint == "did you mean 'all'?"
