"""`anec check --weights`: the report refuses what compile refuses in a weight file.

Compile runs ``check_weights`` before the passes (a key the file lacks, a stored
shape or dtype the const cannot view as declared); the legality report given the
same weights must reject the same consts, at their lines, and not call the
program ANE-legal.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import WeightError
from anec.passes.report import legality
from anec.ir.weight_binding import resolve_weights

from .passes_util import parse_module

SRC = """func f(%x: fp16[1, 4, 1, 8]) {
  %w = const(weight="w") : fp16[4, 4, 1, 1]
  %b = const(weight="b") : fp16[1, 4, 1, 1]
  %y = conv1x1(%x, %w, bias=%b) : fp16[1, 4, 1, 8]
  return %y
}
"""

BIAS = np.zeros((1, 4, 1, 1), np.float16)

# what the file holds -> the const it breaks and what the report says about it
UNFIT = {
    "int": ({"w": np.ones((4, 4, 1, 1), np.int32), "b": BIAS}, "%w",
            "REJECTED (weights) weight 'w' is stored as int32 but const %w is declared fp16[4, 4, 1, 1]"),
    "missing": ({"v": np.ones((4, 4, 1, 1), np.float16), "b": BIAS}, "%w",
                "REJECTED (weights) weight 'w' is not in"),
    "shape": ({"w": np.ones((4, 4, 1, 1), np.float16), "b": np.zeros((1, 5, 1, 1), np.float16)}, "%b",
              "REJECTED (weights) weight 'b' has shape [1, 5, 1, 1] (5 elements) but const %b is declared "
              "fp16[1, 4, 1, 1] (4 elements)"),
}


def _line(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if f" {name} " in line)


@pytest.mark.parametrize("case", sorted(UNFIT))
def test_the_report_rejects_the_consts_compile_refuses(tmp_path, case):
    tensors, bad, says = UNFIT[case]
    path = tmp_path / f"{case}.safetensors"
    save_file(tensors, str(path))
    module = parse_module(SRC, "m.ir")
    store = resolve_weights(module, weights=str(path))
    with pytest.raises(WeightError):  # what compile says about this file
        compile_module(module, weights=str(path), target="m4")
    report = legality(module, "m4", weights=store)
    assert not report.legal and report.errors == 1
    line = _line(report.text, bad)
    assert line.startswith(f"  m.ir:{2 if bad == '%w' else 3}:8") and says in line
    after = report.text.splitlines()[report.text.splitlines().index(line) + 1]
    assert after.startswith("      fix: ") and len(after) > len("      fix: ")  # the WeightError's hint
    other = "%b" if bad == "%w" else "%w"
    assert _line(report.text, other).endswith("ok")
    assert "split_conv_bias" in _line(report.text, "%y")  # legalize still runs, without values
    assert "  weight values: not checked (the weights do not fit the consts above)" in report.text.splitlines()
    assert report.text.rstrip().endswith("verdict: NOT ANE-legal on m4: 1 error")


def test_fitting_weights_are_range_checked_and_legal(tmp_path):
    path = tmp_path / "ok.safetensors"
    save_file({"w": np.ones((4, 4, 1, 1), np.float32), "b": BIAS}, str(path))
    module = parse_module(SRC, "m.ir")
    report = legality(module, "m4", weights=resolve_weights(module, weights=str(path)))
    assert report.legal and "weight values" not in report.text
    save_file({"w": np.full((4, 4, 1, 1), 1e6, np.float32), "b": BIAS}, str(path))
    report = legality(module, "m4", weights=resolve_weights(module, weights=str(path)))
    assert report.errors == 1 and "REJECTED [ANE-FP16-RANGE] weight 'w' has 16 values" in _line(report.text, "%w")


def test_anec_check_takes_weights(tmp_path):
    ir = tmp_path / "m.ir"
    ir.write_text(SRC)
    runner = CliRunner()
    good, bad = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    save_file({"w": np.ones((4, 4, 1, 1), np.float16), "b": BIAS}, str(good))
    save_file({"w": np.ones((4, 4, 1, 1), np.int32), "b": BIAS}, str(bad))
    ok = runner.invoke(main, ["check", str(ir), "--weights", str(good)])
    assert ok.exit_code == 0, ok.output
    assert "verdict: ANE-legal on m4" in ok.output and "weight values" not in ok.output
    plain = runner.invoke(main, ["check", str(ir)])
    assert plain.exit_code == 0 and "weight values: not checked (give weights" in plain.output
    res = runner.invoke(main, ["check", str(ir), "--weights", str(bad)])
    assert res.exit_code == 1
    assert "REJECTED (weights) weight 'w' is stored as int32" in res.output
    assert "not ANE-legal on m4: 1 error" in res.output
    gone = runner.invoke(main, ["check", str(ir), "--weights", str(tmp_path / "nope.safetensors")])
    assert gone.exit_code != 0 and "Traceback" not in gone.output
    assert "does not exist" in gone.output


def test_a_store_that_does_not_fit_is_not_range_checked(tmp_path):
    # 'w' fits but is beyond fp16; 'b' does not fit: the report names b and checks no values
    path = tmp_path / "mixed.safetensors"
    save_file({"w": np.full((4, 4, 1, 1), 1e6, np.float32), "b": np.zeros((1, 5, 1, 1), np.float16)},
              str(path))
    module = parse_module(SRC, "m.ir")
    report = legality(module, "m4", weights=resolve_weights(module, weights=str(path)))
    assert report.errors == 1 and _line(report.text, "%w").endswith("ok")
    assert "REJECTED (weights) weight 'b'" in _line(report.text, "%b")


def test_a_weight_error_without_a_hint_gets_no_fix_line(tmp_path):
    """A perm longer than the stored tensor's rank has no suggested fix: the rejection is the
    const's whole line, and the next line is the next node."""
    path = tmp_path / "perm.safetensors"
    save_file({"w": np.ones((4, 4), np.float16), "b": BIAS}, str(path))
    module = parse_module(SRC.replace('weight="w")', 'weight="w", perm=[1, 0, 2, 3])'), "m.ir")
    report = legality(module, "m4", weights=resolve_weights(module, weights=str(path)))
    assert report.errors == 1 and not report.legal
    lines = report.text.splitlines()
    line = _line(report.text, "%w")
    assert line.endswith("REJECTED (weights) weight 'w' has rank 2 but const %w has perm of length 4")
    assert lines[lines.index(line) + 1] == "  m.ir:3:8  %b  const    ok"
