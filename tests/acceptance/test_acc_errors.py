"""The errors a user meets: located, with a caret line and a hint, never a traceback.

Each case is a small file with one mistake, run through ``anec check`` (in
process, and a few as a subprocess), and the rendered diagnostic is compared:
``file:line:col: error: message``, the source line, a caret under the
offending text, and a hint that says what to write instead.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from anec.diagnostics import AnecError
from anec.passes import PassContext, parse_pass_list, run_pipeline
from anec.passes.pipelines import CLEANUP

from .acc_util import cli, cli_process

F = "func f(%x: fp16[1, 4, 1, 2]) {\n"
W = '  %w = const(weight="layer.w") : fp16[8, 4, 1, 1]\n'

# name -> (text, line:col, message, hint)
CASES = {
    "op_typo": (F + "  %y = rleu(%x)\n  return %y\n}\n", "2:8", "unknown op 'rleu'",
                "did you mean 'relu'?"),
    "attr_typo": (F + "  %y = softmax(%x, axsi=1)\n  return %y\n}\n", "2:8",
                  "softmax has no attribute 'axsi'", "did you mean 'axis'?"),
    "optional_typo": (F + W + "  %y = conv1x1(%x, %w, bais=%w)\n  return %y\n}\n", "3:8",
                      "conv1x1 has no optional operand 'bais'", "did you mean 'bias'?"),
    "dtype_typo": ("func f(%x: fp61[1, 4, 1, 2]) {\n  %y = relu(%x)\n  return %y\n}\n", "1:12",
                   "unknown dtype 'fp61'", "did you mean 'fp16'?"),
    "dtype_foreign": (F + "  %y = cast(%x, dtype=float32)\n  return %y\n}\n", "2:23",
                      "unknown word 'float32' in a literal", "did you mean 'fp32'?"),
    "string_unquoted": (F + "  %y = gelu(%x, mode=tanh)\n  return %y\n}\n", "2:22",
                        "unknown word 'tanh' in a literal",
                        'strings are written in double quotes: "tanh"'),
    "choice_typo": (F + '  %y = gelu(%x, mode="tahn")\n  return %y\n}\n', "2:8",
                    "attribute 'mode' of gelu must be one of", "did you mean 'tanh'?"),
    "broadcast": ("func f(%x: fp16[1, 4, 1, 2], %z: fp16[1, 5, 1, 2]) {\n"
                  "  %y = add(%x, %z)\n  return %y\n}\n", "2:8",
                  "add operands do not broadcast: [1, 4, 1, 2] vs [1, 5, 1, 2]",
                  "broadcast dims must be equal or 1"),
    "conv_channels": (F + '  %w = const(weight="w") : fp16[8, 5, 1, 1]\n'
                      "  %y = conv1x1(%x, %w)\n  return %y\n}\n", "3:8",
                      "conv1x1 input channels differ: input has 4, weight expects 5",
                      "the weight is [Cout, Cin, 1, 1]"),
    "declared_type": (F + "  %y = relu(%x) : fp16[1, 4, 1, 3]\n  return %y\n}\n", "2:8",
                      "declared type fp16[1, 4, 1, 3] of %y does not match the inferred type",
                      "fix the ': type'"),
    "undefined": (F + "  %y = relu(%xx)\n  return %y\n}\n", "2:13",
                  "use of undefined value %xx", "did you mean '%x'?"),
    "used_before_defined": (F + "  %y = relu(%z)\n  %z = relu(%x)\n  return %y\n}\n", "2:13",
                            "value %z is used before it is defined", "move the definition"),
    "undefined_return": (F + "  %y = relu(%x)\n  return %yy\n}\n", "3:10",
                         "use of undefined value %yy", "did you mean '%y'?"),
    "redefined": (F + "  %y = relu(%x)\n  %y = exp(%x)\n  return %y\n}\n", "3:3",
                  "value %y is already defined", "SSA values are defined once"),
    "arity": (F + "  %y = add(%x)\n  return %y\n}\n", "2:8", "add takes 2 operands, got 1",
              "operands: x, y"),
    "split_names": (F + "  %y = split(%x, axis=1, sizes=[2, 2])\n  return %y\n}\n", "2:8",
                    "'split' produces 2 results but 1 name is given", "write 2 names before '='"),
    "split_sizes": (F + "  %a, %b = split(%x, axis=1, sizes=[2, 3])\n  return %a, %b\n}\n",
                    "2:12", "split sizes [2, 3] sum to 5 but dim 1", "add up to the split dim"),
    "missing_percent": (F + "  y = relu(%x)\n  return %y\n}\n", "2:3",
                        "expected a value name like %x, got 'y'", "write '%y'"),
    "const_without_type": (F + "  %c = const(value=1.0)\n  return %x\n}\n", "2:8",
                           "const needs a declared type", "write the type after the call"),
    "const_literal_shape": (F + "  %c = const(value=[1.0, 2.0]) : fp16[3]\n"
                            "  %y = identity(%c)\n  return %y\n}\n", "2:8",
                            "const value has shape [2] but the declared type is fp16[3]",
                            "nested list of exactly the declared shape"),
    "return_input": (F + "  return %x\n}\n", "2:3", "func 'f' returns its input %x directly",
                     "identity"),
    "unclosed_func": (F + "  %y = relu(%x)\n  return %y\n", "3:12",
                      "unexpected end of file inside func 'f'", "closing '}'"),
    "semicolon": (F + "  %y = relu(%x);\n  return %y\n}\n", "2:16", "unexpected character ';'",
                  "statements need no terminator"),
    "no_func": ("// nothing but a comment\n", "1:1", "the file defines no func",
                "a file holds one or more funcs"),
}


def _assert_diagnostic(output: str, path, where: str, message: str, hint: str) -> None:
    lines = output.splitlines()
    head = f"{path}:{where}: error: "
    first = next((i for i, x in enumerate(lines) if x.startswith(head)), None)
    assert first is not None, output
    assert message in lines[first], output
    line, col = map(int, where.split(":"))
    source_line = path.read_text().split("\n")[line - 1]
    assert lines[first + 1] == "  " + source_line.replace("\r", "")
    assert re.fullmatch(rf" {{{col + 1}}}\^+", lines[first + 2]), lines[first + 2]
    hints = [x for x in lines[first + 3:] if x.startswith("hint: ")]
    assert hints and hint in hints[0], output
    assert "Traceback" not in output


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_reports_the_mistake(case, tmp_path):
    text, where, message, hint = CASES[case]
    path = tmp_path / f"{case}.ir"
    path.write_text(text)
    result = cli("check", path)
    assert result.exit_code == 1
    _assert_diagnostic(result.output, path, where, message, hint)


@pytest.mark.parametrize("case", ["op_typo", "dtype_foreign", "unclosed_func", "no_func"])
def test_same_diagnostics_from_a_subprocess(case, tmp_path):
    text, where, message, hint = CASES[case]
    path = tmp_path / f"{case}.ir"
    path.write_text(text)
    for command in ("check", "compile", "interp"):
        proc = cli_process(command, path, "--random-weights", "0") if command != "check" \
            else cli_process(command, path)
        assert proc.returncode == 1, (command, proc.stderr)
        _assert_diagnostic(proc.stderr, path, where, message, hint)


# ---- weights, inputs, targets, pass names ------------------------------------------------


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.ir"
    path.write_text('weights "ckpt.npz"\n' + F + W + "  %y = conv1x1(%x, %w)\n  return %y\n}\n")
    return path


def test_missing_weights_file_points_at_the_directive(model):
    result = cli("interp", model, "--random-inputs", "0")
    assert result.exit_code == 1
    # the path is resolved against the .ir file's directory, and shown so
    missing = f"weight file '{model.parent / 'ckpt.npz'}' does not exist"
    _assert_diagnostic(result.output, model, "1:9", missing, "--random-weights SEED")
    proc = cli_process("compile", model, "-o", model.parent / "out")
    assert proc.returncode == 1 and missing in proc.stderr
    assert "Traceback" not in proc.stderr


def test_weight_shape_mismatch_names_the_key(model):
    np.savez(model.parent / "ckpt.npz", **{"layer.w": np.zeros((8, 5, 1, 1), np.float32)})
    result = cli("interp", model, "--random-inputs", "0")
    assert result.exit_code == 1
    _assert_diagnostic(result.output, model, "3:8",
                       "weight 'layer.w' has shape [8, 5, 1, 1] (40 elements) but const %w is "
                       "declared fp16[8, 4, 1, 1] (32 elements)", "check the key")
    np.savez(model.parent / "ckpt.npz", **{"layer.ww": np.zeros((8, 4, 1, 1), np.float32)})
    result = cli("compile", model, "-o", model.parent / "out")
    assert result.exit_code == 1
    _assert_diagnostic(result.output, model, "3:8", "weight 'layer.w' is not in",
                       "did you mean 'layer.ww'?")


def test_bad_inputs_for_interp(model, tmp_path):
    np.savez(model.parent / "ckpt.npz", **{"layer.w": np.ones((8, 4, 1, 1), np.float32)})
    np.save(tmp_path / "wrong.npy", np.ones((1, 3, 1, 2), np.float16))
    (tmp_path / "text.npy").write_text("1 2 3")
    result = cli("interp", model, "--input", f"x={tmp_path / 'wrong.npy'}")
    assert result.exit_code == 1
    _assert_diagnostic(result.output, model, "2:8", "input 'x' has shape [1, 3, 1, 2] but the "
                       "func declares fp16[1, 4, 1, 2]", "reshape the array")
    result = cli("interp", model, "--input", f"xq={tmp_path / 'wrong.npy'}")
    assert result.exit_code == 1
    _assert_diagnostic(result.output, model, "2:6", "func 'f' has no input 'xq'",
                       "did you mean 'x'?")
    result = cli("interp", model, "--input", f"x={tmp_path / 'text.npy'}")
    assert result.exit_code == 1 and "is not a .npy file of numbers" in result.output
    result = cli("interp", model, "--input", "x")
    assert result.exit_code == 2 and "'x' is not NAME=PATH.npy" in result.output
    ok = cli("interp", model, "--random-inputs", "3")
    assert ok.exit_code == 0 and ok.output.startswith("y  fp16[1, 8, 1, 2]")


def test_unknown_target_and_pass_names(model):
    for command in (["check", model], ["compile", model, "--random-weights", "0"]):
        result = cli(*command, "--target", "m9")
        assert result.exit_code == 1
        assert "error: unknown target 'm9'\nhint: known targets: m1, m2, m3, m4, m5" in result.output
    result = cli("compile", model, "--random-weights", "0", "--passes", "dce,fuse-cast")
    assert result.exit_code == 1 and "did you mean 'fuse-casts'?" in result.output
    for text, hint in (("dce,legalise", "did you mean 'legalize'?"),
                       ("Annotate_SRAM", "did you mean 'annotate-sram'?"),
                       ("optimize", "'optimize' is a pipeline, not a pass"),
                       ("dce,,dce", "write pass names separated by commas")):
        with pytest.raises(AnecError) as info:
            parse_pass_list(text)
        assert hint in info.value.render()
    ctx = PassContext.default()
    ctx.print_ir_after = {"fuse_casts"}
    from anec.ir import parse

    with pytest.raises(AnecError) as info:
        run_pipeline(parse(model.read_text()), CLEANUP, ctx)
    assert "did you mean 'fuse-casts'?" in info.value.render()
