"""The legality report (anec check), anec passes / anec constraints, and generated docs."""

from __future__ import annotations

import re

from pathlib import Path

from click.testing import CliRunner

from anec.cli import main
from anec.constraints import CONSTRAINTS, format_markdown
from anec.passes.listing import format_passes
from anec.passes.report import legality_report

from .passes_util import parse_module

ROOT = Path(__file__).resolve().parents[2]

ILLEGAL = """
func bad(%x: fp32[1, 64, 1, 64], %y: fp16[1, 64, 1, 64]) {
  %xh = cast(%x, dtype=fp16) : fp16[1, 64, 1, 64]
  %c = concat(%xh, %y, axis=3) : fp16[1, 64, 1, 128]
  %w = const(weight="w") : fp16[32768, 64, 1, 1]
  %h = conv1x1(%xh, %w) : fp16[1, 32768, 1, 64]
  %s = reduce_sum(%h, axes=[1], keep_dims=true) : fp16[1, 1, 1, 64]
  %g = gelu(%s) : fp16[1, 1, 1, 64]
  %dead = relu(%y) : fp16[1, 64, 1, 64]
  %d = cast(%g, dtype=fp32) : fp32[1, 1, 1, 64]
  return %c, %d
}"""


def _line(report: str, name: str) -> str:
    return next(line for line in report.splitlines() if f" {name} " in line)


def test_report_explains_each_node_on_an_illegal_program():
    module = parse_module(ILLEGAL, "bad.ir")
    before = module.clone()
    report = legality_report(module, "m1")
    assert module == before  # the report works on a copy
    assert report.startswith("func bad  (target m1)\n")
    assert _line(report, "%xh").endswith("ok")
    concat = _line(report, "%c")
    assert concat.startswith("  bad.ir:4:8") and "REJECTED [ANE-CONCAT]" in concat
    assert "it is returned" in concat
    conv = _line(report, "%h")
    assert "REJECTED [ANE-CONV-CHANNELS]" in conv and "32768 output channels" in conv
    assert "rewritten [ANE-GELU] expand_gelu_tanh" in _line(report, "%g")
    assert "removed: never reaches a returned value (dce)" in _line(report, "%dead")
    lines = report.splitlines()
    # every rejection is followed by an actionable fix
    for i, line in enumerate(lines):
        if "REJECTED" in line:
            assert lines[i + 1].strip().startswith("fix: ")
    assert "bad.ir:2:10: REJECTED [ANE-FP32-IO] input %x is fp32; m1 rejects" in report
    assert "BLOBFILE tensors: 1 of 15" in report  # the gelu expansion adds inline scalars
    # the scalar user is a node the user never wrote: say where it comes from
    assert "because %g_a (added by legalize at bad.ir:8:8) takes an inline scalar" in report
    assert "verdict: NOT ANE-legal on m1: 4 errors" in report


def test_report_on_legal_example_and_host_casts():
    text = (ROOT / "examples" / "gpt2_mlp.ir").read_text()
    module = parse_module(text, "examples/gpt2_mlp.ir")
    report = legality_report(module, "m4")
    assert "verdict: ANE-legal on m4 after 8 rewrites" in report
    assert "%rstd  rsqrt        rewritten [ANE-FP16-RANGE] range-safe" in report
    assert "SRAM: peak 5.1 MiB at %h_conv of 32.0 MiB; no spill risk" in report
    assert "weight values: not checked" in report
    on_m1 = legality_report(module, "m1", options={"host_casts": True})
    assert "rewritten [ANE-FP32-IO] use_host_casts: input %x" in on_m1
    assert "verdict: ANE-legal on m1 after 10 rewrites" in on_m1


def test_check_command_prints_the_report(tmp_path):
    f = tmp_path / "bad.ir"
    f.write_text(ILLEGAL)
    result = CliRunner().invoke(main, ["check", str(f), "--target", "m1"])
    assert result.exit_code == 1, result.output  # rejected nodes make check fail
    assert "REJECTED [ANE-CONCAT]" in result.output and "fix: " in result.output
    assert f"{f}: not ANE-legal on m1: 4 errors (see REJECTED above)" in result.output
    legal = CliRunner().invoke(main, ["check", str(ROOT / "examples" / "gpt2_mlp.ir")])
    assert legal.exit_code == 0, legal.output
    assert "verdict: ANE-legal on m4" in legal.output


def test_passes_command():
    result = CliRunner().invoke(main, ["passes"])
    assert result.exit_code == 0
    assert "fuse-casts" in result.output and re.search(r"default +dce, fuse-casts, dce", result.output)
    assert re.search(r"weights-as-inputs +Turn the weight consts", result.output)


def test_constraints_command():
    runner = CliRunner()
    out = runner.invoke(main, ["constraints"]).output
    assert out.count("\nANE-") + out.startswith("ANE-") == len(CONSTRAINTS)
    one = runner.invoke(main, ["constraints", "ANE-FP32-IO", "--target", "m1"])
    assert one.exit_code == 0 and "m1:       on (fp32_io=false)" in one.output
    bad = runner.invoke(main, ["constraints", "ANE-GELUU"])
    assert bad.exit_code == 1 and "did you mean 'ANE-GELU'?" in bad.output
    bad = runner.invoke(main, ["constraints", "--target", "m7"])
    assert bad.exit_code == 1 and "unknown target 'm7'" in bad.output


def test_docs_passes_md_is_current():
    """docs/passes.md is `anec passes --markdown` (regenerate: anec passes --markdown > docs/passes.md)."""
    assert (ROOT / "docs" / "passes.md").read_text() == format_passes(markdown=True)


def test_docs_constraints_md_is_current():
    """docs/constraints.md is `anec constraints --markdown` (regenerate the same way)."""
    assert (ROOT / "docs" / "constraints.md").read_text() == format_markdown()


def test_a_docstring_code_block_keeps_no_trailing_whitespace():
    """docs/passes.md is generated from the pass docstrings: a whitespace-only line inside an
    indented block is an empty line of the fenced block, and trailing ones are dropped."""
    from anec.passes.listing import _markdown_body

    doc = "Before::\n\n    %y = relu(%x)\n        \n    return %y\n          \nAfter ``x``.\n"
    assert _markdown_body(doc) == ["Before:", "", "```", "%y = relu(%x)", "", "return %y", "```", "",
                                   "After `x`."]
